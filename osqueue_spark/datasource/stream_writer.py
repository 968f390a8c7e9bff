"""``writeStream.format("osqueue")``: each micro-batch published at most once per run
of the query (see :class:`QueueStreamWriter` for how a run is recognised)."""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote, urlparse

import orjson
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage

from osqueue_spark.datasource.options import StreamWriteOptions
from osqueue_spark.datasource.writer import FINGERPRINT_MASK, StagedMessage, stage_rows

log = logging.getLogger("osqueue.spark")


#: The task-local property in which Spark's stream execution names the running
#: query (``StreamExecution.QUERY_ID_KEY``): the query id, the same across restarts
#: from one checkpoint and new when the checkpoint is deleted.
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def _uuid_text(value: Any) -> str | None:
    """``value`` as a canonical UUID string, or None if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        return None


def _task_query_id() -> str | None:
    """The streaming query id Spark hands to this task, or None (not in a task,
    not a streaming query, or a Spark that does not set it)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None
    try:
        return _uuid_text(ctx.getLocalProperty(QUERY_ID_PROPERTY))
    except Exception:  # an unusual TaskContext: fall back as if Spark said nothing
        return None


def checkpoint_query_id(location: str | None) -> str | None:
    """The query id Spark keeps in ``{location}/metadata`` (a JSON line
    ``{"id": "<uuid>"}``, written when the query first starts), for a checkpoint
    on this machine's file system: an absolute path or a ``file:`` URL.

    Returns None for other locations (``s3://``, ``dbfs:``, ``abfss://``, a
    relative path) and when the file is missing or unreadable; never raises.
    A plain path is taken as local even where Spark's default file system is
    another (HDFS, DBFS): there the file is normally absent, and None results.
    """
    if not location:
        return None
    parsed = urlparse(location)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            return None
        path = unquote(parsed.path)
    elif parsed.scheme == "":
        path = location
    else:
        return None
    if not os.path.isabs(path):
        return None
    try:
        with open(os.path.join(path, "metadata"), "rb") as f:
            first = f.readline(64 * 1024)
        data = orjson.loads(first)
    except (OSError, orjson.JSONDecodeError):
        return None
    return _uuid_text(data.get("id")) if isinstance(data, dict) else None


class QueueStreamWriter(DataSourceStreamWriter):
    """``writeStream.format("osqueue")``: each micro-batch is published at most once.

    Tasks stage their rows under the stream's prefix (``streamId``, else
    ``checkpointLocation``); ``commit`` publishes the staged chunks of the
    batch in one broker operation with a once-key that names the batch of
    one run of the query, so a batch Spark replays after a restart is
    recognised and dropped, while a new run of the query (its checkpoint was
    deleted, batch ids start again at 0) publishes. The once-key is, by the
    first source that answers:

    1. ``stream:{stream}:q-{query id}:{batch id}``, the query id from the
       task-local property ``sql.streaming.queryId`` that Spark's stream
       execution sets for every task of a batch (PySpark 4.0 to 4.3 pass no
       query id to ``commit`` itself: it gets only the messages and the batch
       id), carried to the driver in the commit messages;
    2. the same key with the query id from ``{checkpointLocation}/metadata``
       when the checkpoint is on the driver's local file system (see
       :func:`checkpoint_query_id`);
    3. ``stream:{stream}:{batch id}:c-{rows}-{fingerprint}``: the batch id and
       an order-independent digest of the batch's staged jobs. A replay is
       recognised when it stages exactly the same jobs (in any order or split
       across tasks); a new run's batch with other data publishes.

    Limits: replays are recognised only within the queue's idempotency window
    (``dedup_ttl_s``, default 24 h, and the last ``dedup_keys`` keys). Under
    (3), a replay whose rows differ (a non-deterministic query:
    ``current_timestamp()``, ``uuid()``, a source that re-reads differently)
    publishes again, and a new run whose batch has the same id and exactly the
    same jobs as a batch published inside the window is taken for a replay
    and dropped. Batches published by a version that keyed by (stream, batch
    id) alone are not recognised after an upgrade.
    """

    def __init__(self, opts: StreamWriteOptions) -> None:
        self.opts = opts
        self.key = hashlib.sha1(opts.stream_id.encode()).hexdigest()[:16]
        self.prefix = f"s-{self.key}/"

    def write(self, iterator: Iterator[Any]) -> StagedMessage:
        # batches run one after another, so a fresh id per task is enough here;
        # commit() names the batch
        message = stage_rows(self.opts.target, f"{self.prefix}{uuid.uuid4().hex[:8]}-",
                              iterator, fingerprint=True)
        message.query_id = _task_query_id()
        return message

    def once_key(self, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> str:
        """The key that makes publishing batch ``batch_id`` happen once (see the class)."""
        staged = [m for m in messages if isinstance(m, StagedMessage)]
        query_id = next((m.query_id for m in staged if m.query_id), None)
        if query_id is None:
            query_id = checkpoint_query_id(self.opts.checkpoint)
        if query_id is not None:
            return f"stream:{self.key}:q-{query_id}:{batch_id}"
        rows = sum(m.rows for m in staged)
        digest = sum(m.fingerprint for m in staged) & FINGERPRINT_MASK
        return f"stream:{self.key}:{batch_id}:c-{rows}-{digest:032x}"

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        keep = [w for m in messages if isinstance(m, StagedMessage) for w in m.write_ids]
        once = self.once_key(messages, batchId)
        out = self.opts.target.client().publish(self.prefix, keep, once=once)
        if out.get("duplicate"):
            log.info("osqueue stream %s batch %d was published before (%s); dropped the replay",
                     self.key, batchId, once)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.opts.target.client().publish(self.prefix, [])
