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
* ``writeStream``: the same, published at most once per (stream, batch id).
* ``readStream``: each micro-batch claims up to ``maxJobsPerTrigger`` jobs,
  heartbeats them until Spark commits the batch, then completes them. Jobs of
  a query that died come back when their leases expire.

Everything here pickles: options are parsed once into frozen dataclasses and
connections are opened in ``read``/``write``/``commit``, never in ``__init__``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

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

from broker import archive, keys, timefmt
from broker import state as S
from broker.storage import store_from_url
from osqueue_spark.client import staged_line
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
    "worker string, result string, last_error string"
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
        state = S.decode(data, where=f"{store.url}/{keys.state_key(self.opts.queue)}")
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


class ArchiveReader(DataSourceReader):
    """Completed jobs from the archive objects, pruned by hour before reading."""

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
        return [InputPartition(ArchivePart(tuple(objects[i:i + n])))
                for i in range(0, len(objects), n)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        store = store_from_url(self.opts.store)
        part: ArchivePart | None = partition.value
        if part is None:  # Spark reads one empty partition when none were planned
            return
        for key in part.keys:
            for rec in archive.decode_records(store.get(key)):
                done = timefmt.parse(rec["completed_at"])
                if self.since_ms is not None and done < self.since_ms:
                    continue
                if self.until_ms is not None and done > self.until_ms:
                    continue
                result = rec.get("result")
                yield (
                    rec["id"], rec["seq"], rec["status"], rec["priority"],
                    orjson.dumps(rec["payload"]).decode(), rec["attempts"], rec["max_attempts"],
                    ts_text(rec["created_at"]), ts_text(rec["run_at"]), ts(done),
                    rec.get("worker"), None if result is None else orjson.dumps(result).decode(),
                    rec.get("last_error"), *_extract(rec["payload"], self.extra),
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
    write_ids: list[str]
    rows: int


_STAGE_CHUNK_BYTES = 8 * 1024 * 1024  # well under the broker's request limit


def _stage_lines(opts: BrokerOptions, prefix: str, lines: Iterator[bytes]) -> StagedMessage:
    """Stage staged lines under ``prefix``, one write id per chunk of ``batch_size``
    rows (or 8 MB, whichever comes first)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task = f"p{ctx.partitionId()}-t{ctx.taskAttemptId()}" if ctx is not None else "driver"
    client = opts.client()
    write_ids: list[str] = []
    chunk: list[bytes] = []
    size = count = 0

    def flush() -> None:
        write_id = f"{prefix}{task}-c{len(write_ids)}"
        client.stage_lines(write_id, b"".join(chunk))
        write_ids.append(write_id)

    for line in lines:
        chunk.append(line)
        size += len(line)
        if len(chunk) >= opts.batch_size or size >= _STAGE_CHUNK_BYTES:
            flush()
            count += len(chunk)
            chunk, size = [], 0
    if chunk:
        flush()
        count += len(chunk)
    client.close()
    return StagedMessage(write_ids, count)


def _stage_rows(opts: BrokerOptions, prefix: str, rows: Iterator[Any]) -> StagedMessage:
    return _stage_lines(opts, prefix, (staged_line(row_to_job(row)) for row in rows))


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


class QueueStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: StreamWriteOptions) -> None:
        self.opts = opts
        self.key = hashlib.sha1(opts.stream_id.encode()).hexdigest()[:16]
        self.prefix = f"s-{self.key}/"

    def write(self, iterator: Iterator[Any]) -> StagedMessage:
        # batches run one after another, so a fresh id per task is enough here;
        # commit() names the batch
        return _stage_rows(self.opts.target, f"{self.prefix}{uuid.uuid4().hex[:8]}-", iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        keep = [w for m in messages if isinstance(m, StagedMessage) for w in m.write_ids]
        out = self.opts.target.client().publish(self.prefix, keep,
                                                once=f"stream:{self.key}:{batchId}")
        if out.get("duplicate"):
            log.info("osqueue stream %s batch %d was published before; dropped the replay",
                     self.key, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.opts.target.client().publish(self.prefix, [])


# -- streaming read -----------------------------------------------------------------


class QueueStreamReader(DataSourceStreamReader):
    """A consumer: offsets are claim numbers; jobs are completed when Spark commits.

    Leases of claimed, uncommitted jobs are extended on every trigger (each
    ``latestOffset`` call), not by a thread: when the query dies the
    extensions stop, the leases run out and the jobs return to the queue.

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

    def _extend_leases(self) -> None:
        with self._lock:
            held = {j.token: o for o, jobs in self._batches.items() for j in jobs}
        if not held:
            return
        lost = {r.token for r in self._connect().heartbeat(list(held), self.opts.lease_s)
                if not r.ok}
        if lost:
            log.warning("%d claimed job(s) lost their lease before Spark committed them; "
                        "they will be delivered again", len(lost))
            with self._lock:
                for offset in {held[t] for t in lost}:
                    self._batches[offset] = [j for j in self._batches[offset]
                                             if j.token not in lost]

    def initialOffset(self) -> dict[str, int]:
        return {"claim": 0}

    def latestOffset(self, start: dict[str, int] | None = None,
                     limit: Any = None) -> dict[str, int]:
        client = self._connect()
        self._complete_through(self._planned)
        self._extend_leases()
        if start is not None:
            self._last = max(self._last, int(start.get("claim", 0)))
        want = self.opts.max_jobs_per_trigger
        max_rows = getattr(limit, "maxRows", None)
        if isinstance(max_rows, int) and max_rows > 0:
            want = min(want, max_rows)
        jobs = client.claim(self.opts.worker, want, self.opts.lease_s)
        if not jobs:
            return {"claim": self._last}
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
        with self._lock:
            done = [o for o in self._batches if o <= hi]
            jobs = [j for o in done for j in self._batches.pop(o)]
        if not jobs:
            return
        client = self._connect()
        results = client.complete_many([(j.token, None) for j in jobs])
        stale = [r.token for r in results if not r.ok]
        if stale:
            log.warning("%d job(s) of a committed batch had lost their lease and will be "
                        "delivered again", len(stale))

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()


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
