"""The ``osqueue`` Spark data source (PySpark Python Data Source API, Spark 4.x).

* ``spark.read.format("osqueue").option("store", URL).option("queue", Q).load()``:
  one row per job, read straight from storage (no broker). ``table=archive``
  reads completed jobs, one partition per ``objectsPerPartition`` archive
  objects, pruned by ``since``/``until`` and, with
  ``spark.sql.python.filterPushdown.enabled`` and ``filterPushdown=true``
  (Spark 4.1+), by pushed filters on ``completed_at`` and ``status``.
  ``payloadSchema`` (DDL) adds the payload's fields as columns.
* ``df.write.format("osqueue").option("broker", URL).option("queue", Q)``:
  exactly once under task retries and speculation. Each task stages its jobs
  under its own write id; the driver's ``commit`` publishes the staged jobs
  of the successful attempts in one broker operation and drops the rest;
  ``abort`` drops everything; staged jobs of a writer that vanished expire.
* ``writeStream``: the same, each micro-batch published at most once per run
  of the query (see :class:`QueueStreamWriter` for how a run is recognised).
* ``readStream``: each micro-batch claims up to ``maxJobsPerTrigger`` jobs,
  a driver-side thread heartbeats them until Spark commits the batch, then
  they are completed. Jobs of a query that died come back when their leases
  expire.

Everything here pickles: options are parsed once into frozen dataclasses and
connections are opened in ``read``/``write``/``commit``, never in ``__init__``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import orjson
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

from broker import archive, codec, keys, timefmt
from broker.storage import store_from_url
from osqueue_spark.client import staged_line
from osqueue_spark.heartbeat import Heartbeater
from osqueue_spark.options import (
    BrokerOptions,
    ReadOptions,
    StreamReadOptions,
    StreamWriteOptions,
)
from osqueue_spark.rows import arrow_staged_lines, row_to_job, ts, ts_text

log = logging.getLogger("osqueue.spark")

QUEUE_SCHEMA = (
    "id string, seq long, status string, priority int, payload string, attempts int, "
    "max_attempts int, created_at timestamp, run_at timestamp, worker string, "
    "lease_expires_at timestamp, last_error string"
)
ARCHIVE_SCHEMA = (
    "id string, seq long, status string, priority int, payload string, attempts int, "
    "max_attempts int, created_at timestamp, run_at timestamp, completed_at timestamp, "
    "worker string, result string, last_error string, token string, commit_seq long"
)
STREAM_SCHEMA = "id string, payload string, attempt int, lease_expires_at timestamp"


def _payload_fields(schema: Any, base: int) -> list[str]:
    return [f.name for f in schema.fields[base:]]


def _extract(payload: Any, names: list[str]) -> tuple[Any, ...]:
    if not names:
        return ()
    if not isinstance(payload, dict):
        return (None,) * len(names)
    return tuple(payload.get(n) for n in names)


# -- batch read ---------------------------------------------------------------------


class QueueReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: Any) -> None:
        self.opts = opts
        self.extra = _payload_fields(schema, len(QUEUE_SCHEMA.split(",")))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        store = store_from_url(self.opts.store)
        try:
            data = store.read(keys.state_key(self.opts.queue)).data
        except Exception as exc:
            from broker.errors import NotFound

            if isinstance(exc, NotFound):
                return
            raise
        state = codec.decode(data, where=f"{store.url}/{keys.state_key(self.opts.queue)}")
        for job in state.jobs.values():
            lease = job.lease
            payload = orjson.loads(job.payload) if self.extra else None
            yield (
                job.id, job.seq, job.status, job.priority, job.payload.decode(), job.attempts,
                job.max_attempts, ts(job.created_ms), ts(job.run_at_ms),
                lease.worker if lease else None, ts(lease.expires_ms) if lease else None,
                job.last_error, *_extract(payload, self.extra),
            )


@dataclass(frozen=True)
class ArchivePart:
    keys: tuple[str, ...]
    legacy: bool = False  # objects of osqueue 0.1: keep the latest completion per job


class ArchiveReader(DataSourceReader):
    """Completed jobs from the archive objects, pruned by hour before reading.

    Each completed job is one row (see :mod:`broker.archive`): objects written
    by this version hold each job once; objects of osqueue 0.1 (which may hold
    orphans) are read together in one partition that keeps the latest
    completion of each job.
    """

    def __init__(self, opts: ReadOptions, schema: Any) -> None:
        self.opts = opts
        self.extra = _payload_fields(schema, len(ARCHIVE_SCHEMA.split(",")))
        self.since_ms = opts.since_ms
        self.until_ms = opts.until_ms
        self.status: str | None = None

    def partitions(self) -> Sequence[InputPartition]:
        store = store_from_url(self.opts.store)
        start = keys.archive_hour(self.since_ms) if self.since_ms is not None else None
        end = keys.archive_hour(self.until_ms) if self.until_ms is not None else None
        objects = archive.list_objects(store, self.opts.queue, start, end)
        if self.status is not None and self.status != "completed":
            objects = []
        n = self.opts.objects_per_partition
        legacy = [k for k in objects if archive.is_legacy(k)]
        current = [k for k in objects if not archive.is_legacy(k)]
        parts = [InputPartition(ArchivePart(tuple(current[i:i + n])))
                 for i in range(0, len(current), n)]
        if legacy:
            parts.append(InputPartition(ArchivePart(tuple(legacy), legacy=True)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        store = store_from_url(self.opts.store)
        part: ArchivePart | None = partition.value
        if part is None:  # Spark reads one empty partition when none were planned
            return
        lines: Iterable[tuple[dict[str, Any], bytes, bytes]] = (
            line for key in part.keys for line in archive.records_verbatim(store.get(key)))
        if part.legacy:
            lines = archive.latest_per_job(lines, lambda line: line[0])
        for rec, payload, result in lines:  # payload and result as written
            done = timefmt.parse(rec["completed_at"])
            if self.since_ms is not None and done < self.since_ms:
                continue
            if self.until_ms is not None and done > self.until_ms:
                continue
            yield (
                rec["id"], rec["seq"], rec["status"], rec["priority"], payload.decode(),
                rec["attempts"], rec["max_attempts"],
                ts_text(rec["created_at"]), ts_text(rec["run_at"]), ts(done),
                rec.get("worker"), None if rec.get("result") is None else result.decode(),
                rec.get("last_error"), rec.get("token"), rec.get("commit_seq"),
                *_extract(rec["payload"], self.extra),
            )


class ArchivePushdownReader(ArchiveReader):
    """ArchiveReader that also takes pushed filters (Spark 4.1+, conf enabled)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        from pyspark.sql.datasource import (
            EqualTo,
            GreaterThan,
            GreaterThanOrEqual,
            LessThan,
            LessThanOrEqual,
        )

        for f in filters:
            column = f.attribute[0] if len(f.attribute) == 1 else None
            if column == "completed_at" and isinstance(
                    f, GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
                ms = round(f.value.timestamp() * 1000)
                if isinstance(f, GreaterThan | GreaterThanOrEqual):
                    self.since_ms = ms if self.since_ms is None else max(self.since_ms, ms)
                else:
                    self.until_ms = ms if self.until_ms is None else min(self.until_ms, ms)
                yield f  # exact bounds are re-checked by Spark; hours are pruned here
            elif column == "status" and isinstance(f, EqualTo):
                self.status = str(f.value)
                yield f
            else:
                yield f


# -- batch write --------------------------------------------------------------------


@dataclass
class StagedMessage(WriterCommitMessage):
    """What a write task staged. ``query_id``: the streaming query's id when the
    task knew it; ``fingerprint``: with ``fingerprint=True`` staging, the sum
    (mod 2**128) of the 128-bit BLAKE2b digests of the staged lines, a digest of
    the task's jobs that ignores their order and adds up across tasks."""

    write_ids: list[str]
    rows: int
    query_id: str | None = None
    fingerprint: int = 0


_STAGE_CHUNK_BYTES = 8 * 1024 * 1024  # well under the broker's request limit
_FINGERPRINT_MASK = (1 << 128) - 1


def _stage_lines(opts: BrokerOptions, prefix: str, lines: Iterator[bytes], *,
                 fingerprint: bool = False) -> StagedMessage:
    """Stage staged lines under ``prefix``, one write id per chunk of ``batch_size``
    rows (or 8 MB, whichever comes first). With ``fingerprint``, also digest the
    lines (see :class:`StagedMessage`)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task = f"p{ctx.partitionId()}-t{ctx.taskAttemptId()}" if ctx is not None else "driver"
    client = opts.client()
    write_ids: list[str] = []
    chunk: list[bytes] = []
    size = count = total = 0
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes

    def flush() -> None:
        write_id = f"{prefix}{task}-c{len(write_ids)}"
        client.stage_lines(write_id, b"".join(chunk))
        write_ids.append(write_id)

    for line in lines:
        chunk.append(line)
        size += len(line)
        if fingerprint:
            total += from_bytes(blake2b(line, digest_size=16).digest(), "big")
        if len(chunk) >= opts.batch_size or size >= _STAGE_CHUNK_BYTES:
            flush()
            count += len(chunk)
            chunk, size = [], 0
    if chunk:
        flush()
        count += len(chunk)
    client.close()
    return StagedMessage(write_ids, count, fingerprint=total & _FINGERPRINT_MASK)


def _stage_rows(opts: BrokerOptions, prefix: str, rows: Iterator[Any], *,
                fingerprint: bool = False) -> StagedMessage:
    return _stage_lines(opts, prefix, (staged_line(row_to_job(row)) for row in rows),
                        fingerprint=fingerprint)


class QueueWriter(DataSourceArrowWriter):
    """Receives Arrow record batches: payload text goes through without a parse."""

    def __init__(self, opts: BrokerOptions, write_uuid: str) -> None:
        self.opts = opts
        self.prefix = f"w-{write_uuid}/"  # one write: every task's chunks live under it

    def write(self, iterator: Iterator[Any]) -> StagedMessage:
        return _stage_lines(self.opts, self.prefix, arrow_staged_lines(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        keep = [w for m in messages if isinstance(m, StagedMessage) for w in m.write_ids]
        out = self.opts.client().publish(self.prefix, keep, once=f"write:{self.prefix}")
        log.info("osqueue write %s: published %d jobs, discarded %d chunk(s) of failed attempts",
                 self.prefix, out["published"], out["discarded"])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        out = self.opts.client().publish(self.prefix, [])
        log.warning("osqueue write %s aborted: discarded %d staged jobs", self.prefix,
                    out["discarded"])


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
        message = _stage_rows(self.opts.target, f"{self.prefix}{uuid.uuid4().hex[:8]}-",
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
        digest = sum(m.fingerprint for m in staged) & _FINGERPRINT_MASK
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


# -- streaming read -----------------------------------------------------------------


class QueueStreamReader(DataSourceStreamReader):
    """A consumer: offsets are claim numbers; jobs are completed when Spark commits.

    The planning copy of the reader lives on the driver (in the Python process
    Spark keeps for the stream) for the life of the query. Every job it
    claims is kept leased by a background :class:`~osqueue_spark.heartbeat.Heartbeater`
    (a beat every ``leaseS / 3`` seconds, each extending the lease to
    ``leaseS`` seconds) from the claim in ``latestOffset`` until the batch is
    completed, however long the batch runs. ``stop()`` (Spark calls it when
    the query stops or fails) ends the heartbeats; so does the end of the
    driver's process. Claimed jobs not yet completed then come back to the
    queue when their leases run out (after at most ``leaseS`` seconds) and are
    delivered again, to this query after a restart or to any other consumer.
    A job whose lease was lost anyway (the broker unreachable for longer than
    ``leaseS``) is logged and dropped from its batch; the broker redelivers
    it. The copy pickled for executors carries only the options: no client,
    no thread, no claimed jobs.

    Spark calls ``commit(end)`` for a batch only when it plans the next one,
    so an idle stream would hold its last batch forever. ``latestOffset`` is
    called only after the previous batch reached the sink's commit log, so it
    completes every batch already planned by ``partitions`` first.
    """

    def __init__(self, opts: StreamReadOptions) -> None:
        self.opts = opts
        self._batches: dict[int, list[Any]] = {}
        self._last = 0
        self._planned = 0
        self._client: Any = None
        self._hb: Heartbeater | None = None
        self._lock = threading.Lock()

    # The planning copy on the driver holds the connection, heartbeat thread and
    # claimed jobs; the copy pickled for executors needs only the partitions.
    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    def _connect(self) -> Any:
        if self._client is None:
            self._client = self.opts.target.client()
        return self._client

    def _heartbeater(self) -> Heartbeater:
        """The driver's heartbeat thread, started with the first claim."""
        if self._hb is None:
            self._hb = Heartbeater(self._connect(), self.opts.lease_s)
        return self._hb

    def _drop_lost(self) -> None:
        """Forget jobs whose lease the heartbeat found lost: the broker has taken
        them back, and completing them would only be refused."""
        lost = self._hb.take_lost() if self._hb is not None else set()
        if not lost:
            return
        with self._lock:
            dropped = 0
            for offset, jobs in self._batches.items():
                kept = [j for j in jobs if j.token not in lost]
                dropped += len(jobs) - len(kept)
                self._batches[offset] = kept
        if dropped:
            log.warning("%d claimed job(s) lost their lease before Spark committed them; "
                        "they will be delivered again", dropped)

    def initialOffset(self) -> dict[str, int]:
        return {"claim": 0}

    def latestOffset(self, start: dict[str, int] | None = None,
                     limit: Any = None) -> dict[str, int]:
        client = self._connect()
        self._complete_through(self._planned)
        self._drop_lost()
        if start is not None:
            self._last = max(self._last, int(start.get("claim", 0)))
        want = self.opts.max_jobs_per_trigger
        max_rows = getattr(limit, "maxRows", None)
        if isinstance(max_rows, int) and max_rows > 0:
            want = min(want, max_rows)
        jobs = client.claim(self.opts.worker, want, self.opts.lease_s)
        if not jobs:
            return {"claim": self._last}
        self._heartbeater().add(j.token for j in jobs)  # held from now until completed
        offset = max(self._last + 1, time.time_ns() // 1000)  # grows across restarts too
        with self._lock:
            self._batches[offset] = jobs
        self._last = offset
        return {"claim": offset}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        lo, hi = int(start.get("claim", 0)), int(end.get("claim", 0))
        self._last = max(self._last, hi)
        self._planned = max(self._planned, hi)
        with self._lock:
            rows = [
                (j.id, orjson.dumps(j.payload).decode(), j.attempt, j.lease_expires_at)
                for offset, jobs in sorted(self._batches.items()) if lo < offset <= hi
                for j in jobs
            ]
        size = 500
        return [InputPartition(rows[i:i + size]) for i in range(0, len(rows), size)] or [
            InputPartition([])]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for job_id, payload, attempt, expires in partition.value or ():
            yield job_id, payload, attempt, ts_text(expires)

    def commit(self, end: dict[str, int]) -> None:
        self._complete_through(int(end.get("claim", 0)))

    def _complete_through(self, hi: int) -> None:
        """Complete the jobs of every batch up to offset ``hi``; their heartbeats stop
        once the broker has answered. Raises ``OsqueueError`` if the broker stays
        unreachable (the jobs stay held and heartbeated; a later call retries)."""
        with self._lock:
            done = sorted(o for o in self._batches if o <= hi)
            jobs = [j for o in done for j in self._batches[o]]
        if not jobs:
            with self._lock:
                for o in done:
                    self._batches.pop(o, None)
            return
        client = self._connect()
        tokens = [j.token for j in jobs]
        hb = self._hb
        with hb.paused() if hb is not None else contextlib.nullcontext():
            results = client.complete_many([(t, None) for t in tokens])
            if hb is not None:
                hb.remove(tokens)
        with self._lock:
            for o in done:
                self._batches.pop(o, None)
        stale = [r.token for r in results if not r.ok]
        if stale:
            log.warning("%d job(s) of a committed batch had lost their lease and will be "
                        "delivered again", len(stale))

    def stop(self) -> None:
        """End the heartbeats and close the connection. Jobs still held (claimed,
        not committed) return to the queue when their leases run out."""
        if self._hb is not None:
            self._hb.stop()
            self._hb = None
        if self._client is not None:
            self._client.close()
            self._client = None


# -- the data source ------------------------------------------------------------------


class OsqueueDataSource(DataSource):
    """``format("osqueue")``."""

    @classmethod
    def name(cls) -> str:
        return "osqueue"

    def schema(self) -> str:
        table = (self.options.get("table") or "queue").lower()
        base = ARCHIVE_SCHEMA if table == "archive" else QUEUE_SCHEMA
        extra = self.options.get("payloadSchema")
        if self.options.get("broker"):  # writes ignore it; batch reads never take a broker
            return STREAM_SCHEMA
        return f"{base}, {extra}" if extra else base

    def reader(self, schema: Any) -> DataSourceReader:
        opts = ReadOptions.parse(self.options)
        if opts.table == "archive":
            cls = ArchivePushdownReader if opts.filter_pushdown else ArchiveReader
            return cls(opts, schema)
        return QueueReader(opts, schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            from broker.errors import InvalidRequest

            raise InvalidRequest("osqueue only appends: use .mode(\"append\")")
        return QueueWriter(BrokerOptions.parse(self.options), uuid.uuid4().hex)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return QueueStreamWriter(StreamWriteOptions.parse(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return QueueStreamReader(StreamReadOptions.parse(self.options))


def register(spark: Any) -> None:
    """Register the ``osqueue`` data source with a SparkSession."""
    spark.dataSource.register(OsqueueDataSource)
