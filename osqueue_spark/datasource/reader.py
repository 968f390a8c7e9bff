"""Batch reads of ``format("osqueue")``: the queue object and the archive, straight
from storage (no broker).

* ``table=queue`` (default): one row per job, the queue object's own, the
  pending jobs of its segment objects and the dead jobs of its spill
  objects, one consistent version of the queue read in parallel: a
  partition for the object's jobs, one per segment with untaken jobs and
  one per spill object (see :class:`QueueReader`);
* ``table=archive``: completed and cancelled jobs, one partition per
  ``objectsPerPartition`` archive objects, pruned by ``since``/``until`` (on
  when a job ended: ``completed_at``, or ``cancelled_at``).

Neither reader prunes by filters Spark pushes (``filterPushdown=true`` is
accepted and changes nothing; see :data:`FILTER_PUSHDOWN_IGNORED`): up to
PySpark 4.3 Spark keeps the plan of a relation's last pushdown and hands it to
every scan of that relation, so a plan pruned for ``df.where(...)`` would also
serve a later ``df.count()`` or the other side of ``df.where(...).union(df)``,
dropping rows (tests/spark/test_spark_segments.py and
test_spark_archive.py read one DataFrame so).

The status column shows ``cancelled`` for a job cancelled (in the archive,
and in the queue object until archived); ``cancel_requested_at`` (queue) is
set on a claimed job marked for cancellation, ``cancelled_at`` (archive) on
a cancelled job, whose ``completed_at`` is null.

``errors`` (queue, the last column before the payload's) is a job's error
history as ``GET .../jobs/{id}`` shows it, oldest first: the first failure and
the 7 latest, each ``(attempt, failed_at, error)``; ``[]`` for a job that never
failed (a segment's jobs never did). The archive keeps ``last_error`` only
(its lines carry no history).

``payloadSchema`` (DDL) adds the payload's fields as columns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pyspark.sql.datasource import DataSourceReader, InputPartition

from broker import paths, timefmt
from broker.errors import NotFound, OsqueueError, SegmentMissing, StateError, UnknownQueue
from broker.model.claim_records import ClaimRecord
from broker.model.format import archive, segment_format, spill_format
from broker.model.format.decode import decode_state
from broker.model.format.spill_refs import SpillRef, is_out
from broker.model.held import job_at, segment_slices, spill_job_at
from broker.model.job import PENDING, Job
from broker.model.segments.refs import pending_lines
from broker.model.spill_parts import spill_slices
from broker.model.state import QueueState, SegmentRef
from broker.storage import ObjectStore, Versioned, store_from_url
from osqueue_spark.datasource.errors import with_code
from osqueue_spark.datasource.options import ReadOptions
from osqueue_spark.datasource.rows import ts, ts_text

QUEUE_SCHEMA = (
    "id string, seq long, status string, priority int, payload string, attempts int, "
    "max_attempts int, created_at timestamp, run_at timestamp, worker string, "
    "lease_expires_at timestamp, last_error string, cancel_requested_at timestamp, "
    "group string, "  # (new columns go last: the columns before them keep their positions)
    "errors array<struct<attempt:int,failed_at:timestamp,error:string>>"
)
ARCHIVE_SCHEMA = (
    "id string, seq long, status string, priority int, payload string, attempts int, "
    "max_attempts int, created_at timestamp, run_at timestamp, completed_at timestamp, "
    "worker string, result string, last_error string, token string, commit_seq long, "
    "cancelled_at timestamp, group string"
)


def column_names(ddl: str) -> list[str]:
    """The column names of a DDL schema string such as :data:`QUEUE_SCHEMA` or a
    ``payloadSchema``, in order: its top-level columns only (the commas inside
    ``array<struct<...>>``, ``decimal(10, 2)``, a quoted comment or a
    backquoted name separate no columns), a backquoted name without its
    backquotes. Not a check of the DDL: Spark parses it."""
    names, depth, start, quote = [], 0, 0, ""
    for at, char in enumerate(ddl + ","):
        if quote:
            quote = "" if char == quote else quote
        elif char in "`'\"":
            quote = char
        elif char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            column = _COLUMN_NAME.match(ddl[start:at].strip())
            if column:
                names.append(column[1].replace("``", "`") if column[1] is not None
                             else column[0])
            start = at + 1
    return names


_COLUMN_NAME = re.compile(r"`((?:[^`]|``)*)`|[^\s:`]+")


QUEUE_COLUMNS = len(column_names(QUEUE_SCHEMA))
ARCHIVE_COLUMNS = len(column_names(ARCHIVE_SCHEMA))


def _payload_fields(schema: Any, base: int) -> list[str]:
    """The names of the ``payloadSchema`` columns: those of ``schema`` after its
    ``base`` first ones (the table's own)."""
    return [f.name for f in schema.fields[base:]]


def _extract(payload: Any, names: list[str]) -> tuple[Any, ...]:
    if not names:
        return ()
    if not isinstance(payload, dict):
        return (None,) * len(names)
    return tuple(payload.get(n) for n in names)


#: The largest queue object the driver ships to the head partition as it read
#: it. Spark sends each partition inside its task (a task must stay under
#: ``spark.rpc.message.maxSize``, 128 MiB by default) and the driver holds every
#: planned partition. A deep queue's head is small (its pending jobs are in
#: segments); an object that holds every job inline may reach
#: ``max_state_bytes`` (512 MiB): that one the head task reads again.
MAX_SHIPPED_HEAD_BYTES = 16 * 1024 * 1024

#: What the log says once per process when a read sets ``filterPushdown=true``.
FILTER_PUSHDOWN_IGNORED = (
    "filterPushdown=true is accepted and ignored: up to PySpark 4.3 Spark hands every scan "
    "of a DataFrame the plan of its last pushdown, so pruning by a pushed filter could drop "
    "rows from another scan of it; the reads prune by since/until only")


@dataclass(frozen=True)
class HeadPart:
    """The head partition: the queue object's own jobs.

    ``data`` is the object as the driver read it (at most
    :data:`MAX_SHIPPED_HEAD_BYTES`): the task reads that version, whatever
    the store holds by then. Or None: the task reads the object again. If
    ``segments`` (how many segment partitions were planned beside this one)
    is not 0, it must find ``etag``, the version whose cursors those
    partitions read from, else the read fails (the queue moved on: read it
    again). If it is 0, whatever version it finds will do, and the task reads
    that version's segments itself: one version, read by one task.
    """

    etag: str
    data: bytes | None
    segments: int


@dataclass(frozen=True)
class SpillPart:
    """A spill partition: the jobs of ``ref``'s spill object (dead ones, or
    pending from its cursor on), but those taken out, as the planned version
    of the head has them, and ``held``: its positions that claim records of
    that version hold (claimed; :func:`broker.model.spill_parts.spill_slices`)."""

    ref: SpillRef
    held: tuple[tuple[int, ClaimRecord, int], ...] = ()


@dataclass(frozen=True)
class SegmentPart:
    """A segment partition: the untaken jobs of ``ref``'s segment (positions
    ``ref.taken`` to ``ref.count``), as the planned version of the head has it,
    and ``held``: its positions that claim records of that version hold
    (claimed) or completed awaiting their archive object
    (:func:`broker.model.held.segment_slices`)."""

    ref: SegmentRef
    held: tuple[tuple[int, ClaimRecord, int], ...] = ()


class QueueReader(DataSourceReader):
    """The queue table: one row per job, pending jobs of segments included.

    One consistent version: ``partitions`` (on the driver) reads the queue
    object once and plans a head partition and one partition per segment with
    untaken jobs, each segment partition carrying its reference (key, etag,
    cursor) from that version. A segment is immutable, so its part from the
    cursor on is what that version holds pending; the head partition reads
    the jobs of the same version (see :class:`HeadPart`). A job the broker
    takes from a segment while the read runs is therefore read once, as
    pending. A segment object missing or of another etag fails the read
    (``segment_missing``, naming the object): if the queue has moved on (the
    broker deletes a segment once its jobs are all taken) the error says to
    read again; rows are never silently dropped.
    """

    def __init__(self, opts: ReadOptions, schema: Any) -> None:
        self.opts = opts
        self.extra = _payload_fields(schema, QUEUE_COLUMNS)

    @with_code
    def partitions(self) -> Sequence[InputPartition]:
        store = store_from_url(self.opts.store)
        got = _read_head(store, self.opts.queue)
        if got is None:
            if self.opts.missing_queue == "empty":
                return []  # no queue object: no rows, as asked
            raise missing_queue(store, self.opts.queue)
        state = decode_state(got.data, where=_head_where(store, self.opts.queue))
        live = [ref for ref in state.segment_refs if ref.remaining or ref.key in state.seg_names]
        spills = _live_spills(state)
        data = got.data if len(got.data) <= MAX_SHIPPED_HEAD_BYTES else None
        return [InputPartition(HeadPart(got.etag, data, len(live) + len(spills))),
                *(InputPartition(SegmentPart(ref, segment_slices(state, ref))) for ref in live),
                *(InputPartition(SpillPart(ref, spill_slices(state, ref))) for ref in spills)]

    @with_code
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        # None: no partition was planned (no queue object); see ArchiveReader.read
        part = None if partition is None else partition.value
        if part is None:
            return
        store = store_from_url(self.opts.store)
        if isinstance(part, SegmentPart):
            yield from self._segment_rows(store, part.ref, part.held)
            return
        if isinstance(part, SpillPart):
            yield from self._spill_rows(store, part.ref, part.held)
            return
        where = _head_where(store, self.opts.queue)
        refs: list[SegmentRef] = []
        spills: list[SpillRef] = []
        if part.data is not None:
            state = decode_state(part.data, where=where)
        else:
            got = _read_head(store, self.opts.queue)
            if part.segments and (got is None or got.etag != part.etag):
                raise StateError(
                    f"{where} changed since this read was planned, and its segments are "
                    "read from the planned version: the queue moved on; read it again")
            if got is None:
                return  # deleted since planned, and nothing else was planned
            state = decode_state(got.data, where=where)
            if not part.segments:  # this version is read by this task alone
                refs = [ref for ref in state.segment_refs
                        if ref.remaining or ref.key in state.seg_names]
                spills = _live_spills(state)
        for job in state.jobs.values():
            yield _job_row(job, self.extra)
        for ref in refs:
            yield from self._segment_rows(store, ref, segment_slices(state, ref))
        for spill in spills:
            yield from self._spill_rows(store, spill, spill_slices(state, spill))

    def _spill_rows(self, store: ObjectStore, ref: SpillRef,
                    held: tuple[tuple[int, ClaimRecord, int], ...] = (),
                    ) -> Iterator[tuple[Any, ...]]:
        """The rows of ``ref``'s spill object, read through the broker's one
        check (a missing or changed object fails the read, naming it: the
        queue moved on if it no longer references it)."""
        data: bytes | None = None
        etag: str | None = None
        try:
            got = store.read(ref.key)
            data, etag = got.data, got.etag
        except NotFound:
            pass  # (read_checked refuses it, naming the object)
        try:
            jobs = spill_format.read_checked(ref, data, etag, store.url, 0, ref.count)
        except SegmentMissing:
            if not _dropped(store, self.opts.queue, ref):
                raise
            raise SegmentMissing(
                f"spill object {store.url}/{ref.key} of queue {self.opts.queue!r} is gone or "
                "changed, and the queue no longer references it: the queue moved on since "
                "this read was planned (its jobs were redriven or purged); read it "
                "again") from None
        for at, record, pos in held:  # (held at a record's spill part: claimed, or completed)
            yield _job_row(spill_job_at(record, pos, jobs[at]), self.extra)
        status = ref.kind
        lo = ref.taken if status == PENDING else 0
        for pos, job in enumerate(jobs):
            if pos >= lo and not is_out(ref, pos):
                yield _job_row(job.to_job(status), self.extra)

    def _segment_rows(self, store: ObjectStore, ref: SegmentRef,
                      held: tuple[tuple[int, ClaimRecord, int], ...] = (),
                      ) -> Iterator[tuple[Any, ...]]:
        data: bytes | None = None
        etag: str | None = None
        try:
            got = store.read(ref.key)
            data, etag = got.data, got.etag
        except NotFound:
            pass  # (read_checked refuses it, naming the object)
        start = min(ref.taken, held[0][0]) if held else None  # (held lines lie before the cursor)
        try:
            lines = segment_format.read_checked(ref, data, etag, store.url, start)
        except SegmentMissing:
            if not _dropped(store, self.opts.queue, ref):
                raise
            raise SegmentMissing(
                f"segment {store.url}/{ref.key} of queue {self.opts.queue!r} is gone or "
                "changed, and the queue no longer references it: the queue moved on since "
                "this read was planned (the broker deletes a segment once its jobs are all "
                "taken); read it again") from None
        if start is not None:
            for at, record, pos in held:
                yield _job_row(job_at(record, pos, ref, lines[at - start]), self.extra)
            lines = lines[ref.taken - start:]
        for seq, line in pending_lines(ref, lines):  # (a grouped one's: untaken positions)
            yield _job_row(segment_format.segment_job(seq, line, ref), self.extra)


def missing_queue(store: ObjectStore, queue: str) -> UnknownQueue:
    """The error for a read of a queue that has no object in ``store``."""
    return UnknownQueue(
        f"queue {queue!r} does not exist in {store.url} (no {paths.state_key(queue)}; a queue "
        "is created by its first push): check the queue name and the store, or read a queue "
        "that may not exist yet with .option(\"missingQueue\", \"empty\")")


def _head_where(store: ObjectStore, queue: str) -> str:
    return f"{store.url}/{paths.state_key(queue)}"


def _read_head(store: ObjectStore, queue: str) -> Versioned | None:
    try:
        return store.read(paths.state_key(queue))
    except NotFound:
        return None


def _live_spills(state: QueueState) -> list[SpillRef]:
    """The head's spill refs that still hold jobs (pending, dead, or claimed:
    held at a claim record's spill part)."""
    return [ref for ref in state.spill_refs if isinstance(ref, SpillRef)
            and (ref.live or ref.key in state.seg_names)]


def _dropped(store: ObjectStore, queue: str, ref: SegmentRef | SpillRef) -> bool:
    """Whether the queue object in the store no longer references ``ref``'s
    object at ``ref``'s etag (or is gone): its segment is then missing because
    the queue moved on. False if that cannot be told."""
    try:
        got = _read_head(store, queue)
        if got is None:
            return True
        state = decode_state(got.data, where=_head_where(store, queue))
    except OsqueueError:
        return False
    named = {(r.key, r.etag) for r in state.segment_refs} \
        | {(r.key, r.etag) for r in state.spill_refs}
    return (ref.key, ref.etag) not in named


def _job_row(job: Job, extra: list[str]) -> tuple[Any, ...]:
    lease = job.lease
    payload = orjson.loads(job.payload) if extra else None
    return (
        job.id, job.seq, job.status, job.priority, job.payload.decode(), job.attempts,
        job.max_attempts, ts(job.created_ms), ts(job.run_at_ms),
        lease.worker if lease else None, ts(lease.expires_ms) if lease else None,
        job.last_error, ts(job.cancel_ms), job.group,
        [(attempt, ts(failed_ms), text) for attempt, failed_ms, text in job.errors],
        *_extract(payload, extra),
    )


@dataclass(frozen=True)
class ArchivePart:
    keys: tuple[str, ...]
    legacy: bool = False  # objects of osqueue 0.1: keep the latest completion per job


class ArchiveReader(DataSourceReader):
    """Completed and cancelled jobs from the archive objects, pruned by hour
    before reading.

    Each completed or cancelled job is one row (see
    :mod:`broker.model.format.archive`): objects written by this version hold
    each job once; objects of osqueue 0.1 (which may hold orphans) are read
    together in one partition that keeps the latest completion of each job.
    """

    def __init__(self, opts: ReadOptions, schema: Any) -> None:
        self.opts = opts
        self.extra = _payload_fields(schema, ARCHIVE_COLUMNS)

    @with_code
    def partitions(self) -> Sequence[InputPartition]:
        store = store_from_url(self.opts.store)
        since, until = self.opts.since_ms, self.opts.until_ms
        start = paths.archive_hour(since) if since is not None else None
        end = paths.archive_hour(until) if until is not None else None
        objects = archive.list_objects(store, self.opts.queue, start, end)
        n = self.opts.objects_per_partition
        legacy = [k for k in objects if archive.is_legacy(k)]
        current = [k for k in objects if not archive.is_legacy(k)]
        parts = [InputPartition(ArchivePart(tuple(current[i:i + n])))
                 for i in range(0, len(current), n)]
        if legacy:
            parts.append(InputPartition(ArchivePart(tuple(legacy), legacy=True)))
        if not parts and self.opts.missing_queue == "error" and \
                _read_head(store, self.opts.queue) is None:
            raise missing_queue(store, self.opts.queue)
        return parts

    @with_code
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        store = store_from_url(self.opts.store)
        # Spark reads one empty partition when none were planned: PySpark 4.2+ passes
        # it as InputPartition(None), 4.0 and 4.1 as a bare None.
        part: ArchivePart | None = None if partition is None else partition.value
        if part is None:
            return
        since, until = self.opts.since_ms, self.opts.until_ms
        lines: Iterable[tuple[dict[str, Any], bytes, bytes]] = (
            line for key in part.keys for line in archive.records_verbatim(store.get(key)))
        if part.legacy:
            lines = archive.latest_per_job(lines, lambda line: line[0])
        for rec, payload, result in lines:  # payload and result as written
            completed = rec.get("completed_at")  # (a cancelled job: cancelled_at instead)
            done = timefmt.parse(completed or rec["cancelled_at"])
            if since is not None and done < since:
                continue
            if until is not None and done > until:
                continue
            yield (
                rec["id"], rec["seq"], rec["status"], rec["priority"], payload.decode(),
                rec["attempts"], rec["max_attempts"],
                ts_text(rec["created_at"]), ts_text(rec["run_at"]), ts(done) if completed else None,
                rec.get("worker"), None if rec.get("result") is None else result.decode(),
                rec.get("last_error"), rec.get("token"), rec.get("commit_seq"),
                ts_text(rec.get("cancelled_at")), rec.get("group"),
                *_extract(rec["payload"], self.extra),
            )
