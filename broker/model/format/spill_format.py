"""A spill object's bytes (format ``osqueue-jobs``, version 1): written
(:func:`encode_spills`), checked and read a window at a time
(:func:`spill_jobs`, :func:`read_checked`). Pure: bytes and values in, bytes
and values out. What the head keeps per spill object, and the rules over it:
:mod:`broker.model.format.spill_refs`.

A spill object (key from :func:`broker.paths.spill_key`) holds jobs a commit
took out of the head: failed jobs waiting for their retry (kind
``"pending"``) or dead jobs (kind ``"dead"``), each whole (payload, attempts,
error history), so nothing about them needs the head. A header line, then one
job a line, each line readable with ``jq`` on its own::

    {"format":"osqueue-jobs","version":1,"queue":"q","kind":"pending","priority":0,"count":2,"errors":["ValueError('boom')"]}
    {"id":"j0000001234","seq":1234,"run_at":"2026-11-22T03:43:49.000Z","attempts":1,"max_attempts":2,"created_at":"2026-11-22T03:40:00.000Z","err":[[1,"2026-11-22T03:43:48.000Z",0]],"payload":{"doc":1234}}
    {"id":"j0000001240","seq":1240,"run_at":"2026-11-22T03:43:50.000Z","attempts":1,"max_attempts":2,"created_at":"2026-11-22T03:40:00.000Z","key":"k-1240","err":[[1,"2026-11-22T03:43:49.000Z",0]],"payload":{"doc":1240}}

- ``"pending"``: every job has the header's ``priority`` (one object per
  priority); lines sorted by (run-at, seq), so the lines come out in claim
  order and the first untaken line is the object's earliest due job.
- ``"dead"``: no header priority; each line carries its own ``"priority"``
  (after ``seq``), and the lines are sorted by (priority, higher first; then
  seq), so a redrive by reference (every job due at one time) yields them in
  claim order too. ``run_at`` is kept for the record.
- ``err``: the job's error history, oldest first, ``[attempt, failed_at, i]``
  with ``i`` indexing the header's ``errors`` table: each text is stored once
  per object (a bad deploy's identical tracebacks cost one entry, not one a
  job). At most :data:`~broker.limits.ERRORS_KEPT` entries a job, each text
  at most :data:`~broker.limits.MAX_ERROR_CHARS` characters
  (:func:`bounded_errors`). Left out when the job has none; ``key`` (its
  idempotency key) likewise.
- ``payload`` last, verbatim (the JSON bytes as pushed), so reading a line
  needs no re-encoding: a job whose payload holds a raw line break cannot be
  a line and stays in the head.

At most :data:`MAX_SPILL_JOBS` jobs and (but for one larger job alone)
:data:`MAX_SPILL_BYTES` bytes an object: a larger spill is several objects,
each a window the broker may hold whole (the segments' bounds).

Errors: every refusal of :func:`encode_spills` and of the readers is a
``ValueError`` whose message names the object (``spill of 'q'`` when
writing, ``spill object <key>`` when reading) and the line or field;
payloads and error texts are never quoted. :func:`read_checked`, the check of
a read object that the broker and the Spark reader share, raises
``SegmentMissing`` (code ``segment_missing``) and ``CorruptState``
(``corrupt_state``) instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import orjson

from broker import timefmt, wire
from broker.errors import CorruptState, InvalidRequest, shown
from broker.limits import (
    ERRORS_KEPT,
    MAX_ATTEMPTS,
    MAX_ERROR_CHARS,
    MAX_KEY_CHARS,
    MAX_PRIORITY,
)
from broker.model.format.segment_format import (
    MAX_SEGMENT_JOBS,
    check_int,
    check_object_version,
    check_time,
    header_object,
)
from broker.model.indexes import SEQ_MASK, TIME_MASK
from broker.model.job import DEAD, PENDING, Job, job_id_for
from broker.model.job import ErrorEntry as ErrorEntry  # (the Job's; re-exported)
from broker.model.job import bounded_errors as bounded_errors
from broker.paths import check_queue_name, parse_spill_key

SPILL_FORMAT = "osqueue-jobs"
SPILL_VERSION = 1
#: The kinds of spill object (as :data:`broker.paths.SPILL_KINDS` names them).
KINDS = (PENDING, DEAD)
#: Most jobs in one spill object: what a window of a segment may hold.
MAX_SPILL_JOBS = MAX_SEGMENT_JOBS
#: Most bytes of one spill object, unless it holds one larger job alone (a
#: payload may be up to a queue's ``max_payload_bytes``).
MAX_SPILL_BYTES = 16 * 1024 * 1024

_HEADER_FIELDS = {
    PENDING: frozenset({"format", "version", "queue", "kind", "priority", "count", "errors"}),
    DEAD: frozenset({"format", "version", "queue", "kind", "count", "errors"}),
}
_LINE_FIELDS = frozenset({"id", "seq", "run_at", "attempts", "max_attempts", "created_at"})
_OPTIONAL_FIELDS = frozenset({"key", "err"})
#: each history entry's time's name in errors (built once, not a line at a time)
_FAILED_AT = tuple(f": err[{i}] failed_at" for i in range(ERRORS_KEPT))
_PAYLOAD = b',"payload":'
# ids and times never need JSON escaping, so they are spliced in
_PENDING_LINE = (b'{"id":"j%010d","seq":%d,"run_at":"%s","attempts":%d,"max_attempts":%d,'
                 b'"created_at":"%s"')
_DEAD_LINE = (b'{"id":"j%010d","seq":%d,"priority":%d,"run_at":"%s","attempts":%d,'
              b'"max_attempts":%d,"created_at":"%s"')


# -- jobs and their error history ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpilledJob:
    """A job as a spill object holds it: its fields (times in ms since the
    epoch), ``payload`` its JSON bytes verbatim, ``errors`` its history,
    oldest first. Its status is the object's kind (or its reference's:
    :func:`read_checked`)."""

    seq: int
    payload: bytes
    priority: int
    run_at_ms: int
    attempts: int
    max_attempts: int
    created_ms: int
    key: str | None = None
    errors: tuple[ErrorEntry, ...] = ()

    @property
    def id(self) -> str:
        """The job's id (``j`` and its seq, zero-padded)."""
        return job_id_for(self.seq)

    @property
    def last_error(self) -> str | None:
        """The newest error text (what ``last_error`` shows), or None."""
        return (self.errors[-1].text or None) if self.errors else None

    def redriven(self, reset_ms: int) -> SpilledJob:
        """The job after a redrive at ``reset_ms``: pending again with no
        attempts, due then, its error history kept."""
        return SpilledJob(self.seq, self.payload, self.priority, reset_ms, 0,
                          self.max_attempts, self.created_ms, self.key, self.errors)

    def to_job(self, status: str) -> Job:
        """The job as a :class:`~broker.model.job.Job` of ``status`` (pending or
        dead), with its whole error history (``last_error`` its newest text).
        ``ValueError`` for another status."""
        if status not in KINDS:
            raise ValueError(f"a spilled job is pending or dead, not {shown(status)}")
        return Job(self.seq, self.payload, status, self.priority, self.run_at_ms,
                   self.attempts, self.max_attempts, self.created_ms, self.key,
                   errors=self.errors)


def _check_job(job: SpilledJob, kind: str, where: str) -> None:
    """``ValueError`` naming ``where`` unless ``job`` may be a job of a ``kind``
    object: every field in range, a pending job with attempts left, its
    history bounded."""
    check_int(job.seq, f"{where}: seq", 1, SEQ_MASK)
    check_int(job.run_at_ms, f"{where}: run_at", 0, TIME_MASK)
    check_int(job.created_ms, f"{where}: created_at", 0, TIME_MASK)
    _check_counts(job, kind, where)
    if len(job.errors) > ERRORS_KEPT:
        raise ValueError(f"{where}: {len(job.errors)} errors kept; at most {ERRORS_KEPT}")
    for i, (attempt, failed_ms, text) in enumerate(job.errors):
        check_int(attempt, f"{where}: err[{i}] attempt", 1, MAX_ATTEMPTS)
        check_int(failed_ms, f"{where}: err[{i}] failed_at", 0, TIME_MASK)
        if not isinstance(text, str) or len(text) > MAX_ERROR_CHARS:
            raise ValueError(f"{where}: err[{i}] text must be a string of at most "
                             f"{MAX_ERROR_CHARS} characters")


def _check_counts(job: SpilledJob, kind: str, where: str) -> None:
    """The part of :func:`_check_job` that :func:`parse_line` leaves to it
    (the seq, times and history it checked as it read them): the priority,
    the attempts (a pending job with one left) and the key."""
    check_int(job.priority, where, -MAX_PRIORITY, MAX_PRIORITY, ": priority")
    check_int(job.max_attempts, where, 1, MAX_ATTEMPTS, ": max_attempts")
    # (as the head's rule: a pending job has an attempt left)
    check_int(job.attempts, where, 0,
              job.max_attempts - 1 if kind == PENDING else job.max_attempts, ": attempts")
    if job.key is not None and (not isinstance(job.key, str)
                                or not 0 < len(job.key) <= MAX_KEY_CHARS):
        raise ValueError(f"{where}: key must be 1..{MAX_KEY_CHARS} characters")


def _order(kind: str) -> Callable[[SpilledJob], tuple[int, int]]:
    """The sort key of a ``kind`` object's lines: (run-at, seq) for pending,
    (priority, higher first; seq) for dead."""
    if kind == PENDING:
        return lambda job: (job.run_at_ms, job.seq)
    return lambda job: (-job.priority, job.seq)


# -- writing ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EncodedSpill:
    """One spill object's bytes, and what its reference needs to know of them
    (without reading them again): ``priority`` (a pending object's; None for
    dead), how many jobs, the lowest and highest seq, ``first`` (line 0's
    priority and seq), ``next`` (line 0's run-at and seq: a pending object's
    next job), the earliest due and creation times (ms)."""

    data: bytes
    kind: str
    priority: int | None
    count: int
    seqs: tuple[int, int]
    first: tuple[int, int]
    next: tuple[int, int]
    due_min: int
    created_min: int


def encode_spills(queue: str, kind: str, jobs: Iterable[SpilledJob], *,
                  max_jobs: int = MAX_SPILL_JOBS,
                  max_bytes: int = MAX_SPILL_BYTES) -> list[EncodedSpill]:
    """The spill objects of ``jobs`` (at least one) of ``queue``, of ``kind``
    (``"pending"`` or ``"dead"``): pending jobs make one object or more per
    priority (higher first), dead ones one or more; the lines of each are
    sorted (module docstring), and an object holds at most ``max_jobs`` jobs
    and ``max_bytes`` bytes (but for a single larger job), the next job
    starting the next object. Each job's error history is first bounded
    (:func:`bounded_errors`).

    ``ValueError`` (naming the queue and the job) for another kind, no jobs,
    a seq twice, a field out of range, a pending job with no attempt left,
    or a payload that is empty or holds a line break.
    """
    try:
        check_queue_name(queue)
    except InvalidRequest as exc:
        raise ValueError(str(exc)) from None
    if kind not in KINDS:
        raise ValueError(f"spill of {queue!r}: kind {shown(kind)} is not one of {list(KINDS)}")
    check_int(max_jobs, f"spill of {queue!r}: max_jobs", 1, MAX_SPILL_JOBS)
    check_int(max_bytes, f"spill of {queue!r}: max_bytes", 1, 1 << 40)
    bounded = []
    for job in jobs:
        if len(job.errors) > ERRORS_KEPT or any(
                len(entry.text) > MAX_ERROR_CHARS for entry in job.errors
                if isinstance(entry.text, str)):
            job = replace(job, errors=bounded_errors(job.errors))
        where = f"spill of {queue!r}: job {job.id}"
        _check_job(job, kind, where)
        if not job.payload or b"\n" in job.payload:
            raise ValueError(f"{where}: its payload is empty or holds a line break")
        bounded.append(job)
    if not bounded:
        raise ValueError(f"spill of {queue!r}: no jobs")
    bounded.sort(key=_order(kind))
    if len({job.seq for job in bounded}) != len(bounded):
        raise ValueError(f"spill of {queue!r}: a job is in it twice")
    if kind == DEAD:
        return _chunks(queue, kind, None, bounded, max_jobs, max_bytes)
    out: list[EncodedSpill] = []
    for priority in sorted({job.priority for job in bounded}, reverse=True):
        group = [job for job in bounded if job.priority == priority]
        out.extend(_chunks(queue, kind, priority, group, max_jobs, max_bytes))
    return out


def _header(queue: str, kind: str, priority: int | None, count: int,
            errors: Iterable[str]) -> bytes:
    fields: dict[str, Any] = {"format": SPILL_FORMAT, "version": SPILL_VERSION,
                              "queue": queue, "kind": kind}
    if priority is not None:
        fields["priority"] = priority
    fields["count"] = count
    fields["errors"] = list(errors)
    return orjson.dumps(fields)


def _line(kind: str, job: SpilledJob, table: dict[str, int],
          new: dict[str, int]) -> bytes:
    """``job``'s line, its error texts indexed by ``table`` or, for texts not in
    it, by ``new`` (filled here, numbered after ``table``'s)."""
    run_at, created = timefmt.fmt_bytes(job.run_at_ms), timefmt.fmt_bytes(job.created_ms)
    if kind == PENDING:
        head = _PENDING_LINE % (job.seq, job.seq, run_at, job.attempts, job.max_attempts,
                                created)
    else:
        head = _DEAD_LINE % (job.seq, job.seq, job.priority, run_at, job.attempts,
                             job.max_attempts, created)
    parts = [head]
    if job.key is not None:
        parts.append(b',"key":' + orjson.dumps(job.key))
    if job.errors:
        entries = []
        for attempt, failed_ms, text in job.errors:
            index = table.get(text)
            if index is None:
                index = new.setdefault(text, len(table) + len(new))
            entries.append(b'[%d,"%s",%d]' % (attempt, timefmt.fmt_bytes(failed_ms), index))
        parts.append(b',"err":[' + b",".join(entries) + b"]")
    parts += (_PAYLOAD, job.payload, b"}")
    return b"".join(parts)


def _chunks(queue: str, kind: str, priority: int | None, jobs: list[SpilledJob],
            max_jobs: int, max_bytes: int) -> list[EncodedSpill]:
    """``jobs`` (sorted) in objects of at most ``max_jobs`` jobs and ``max_bytes``
    bytes each (but for a single larger job), filled in order."""
    # the header without texts, its count with as many digits as it can have
    # (sizes are counted as an upper bound: each text's comma too)
    bare = len(_header(queue, kind, priority, max_jobs, ())) + 1
    out: list[EncodedSpill] = []
    lines: list[bytes] = []
    held: list[SpilledJob] = []
    table: dict[str, int] = {}
    size = bare
    for job in jobs:
        new: dict[str, int] = {}
        line = _line(kind, job, table, new)
        more = len(line) + 1 + sum(len(orjson.dumps(text)) + 1 for text in new)
        if lines and (len(lines) >= max_jobs or size + more > max_bytes):
            out.append(_object(queue, kind, priority, held, lines, table))
            lines, held, table, size = [], [], {}, bare
            new = {}
            line = _line(kind, job, table, new)
            more = len(line) + 1 + sum(len(orjson.dumps(text)) + 1 for text in new)
        table.update(new)
        lines.append(line)
        held.append(job)
        size += more
    out.append(_object(queue, kind, priority, held, lines, table))
    return out


def _object(queue: str, kind: str, priority: int | None, jobs: list[SpilledJob],
            lines: list[bytes], table: dict[str, int]) -> EncodedSpill:
    header = _header(queue, kind, priority, len(lines), table)  # (in index order)
    seqs = [job.seq for job in jobs]
    return EncodedSpill(
        data=b"".join((header, b"\n", b"\n".join(lines), b"\n")),
        kind=kind, priority=priority, count=len(lines), seqs=(min(seqs), max(seqs)),
        first=(jobs[0].priority, jobs[0].seq), next=(jobs[0].run_at_ms, jobs[0].seq),
        due_min=min(job.run_at_ms for job in jobs),
        created_min=min(job.created_ms for job in jobs))


# -- reading ------------------------------------------------------------------------


class SpillSource(Protocol):
    """What the readers need of a spill object's reference (a
    :class:`broker.model.format.spill_refs.SpillRef` is one): its key and etag,
    its kind (``"pending"`` for a dead object redriven by reference, whose
    ``reset_ms`` is then set), a pending object's ``priority``, its job
    count and cursor (``taken``), its lowest and highest seq, and line 0's
    priority and seq (``first``, a dead object's; None if not kept)."""

    @property
    def key(self) -> str: ...
    @property
    def etag(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def priority(self) -> int | None: ...
    @property
    def count(self) -> int: ...
    @property
    def taken(self) -> int: ...
    @property
    def seqs(self) -> tuple[int, int]: ...
    @property
    def first(self) -> tuple[int, int] | None: ...
    @property
    def reset_ms(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class SpillHeader:
    """A spill object's first line, checked (:func:`read_header`): ``priority``
    None for a dead object; ``errors`` its table of error texts."""

    queue: str
    kind: str
    priority: int | None
    count: int
    errors: tuple[str, ...]


def read_header(data: bytes, key: str) -> SpillHeader:
    """The checked header of spill object ``data`` (read from ``key``, named in
    errors). ``ValueError`` for a first line that is not the header of a spill
    object this broker reads (another format, a newer version, a missing,
    extra or mistyped field, an error text too long)."""
    raw = header_object(data, f"spill object {key}", SPILL_FORMAT)
    version = raw.get("version")
    if type(version) is not int or version != SPILL_VERSION:
        raise ValueError(f"spill object {key}: version {shown(version)}; this broker reads "
                         f"version {SPILL_VERSION}")
    kind = raw.get("kind")
    fields = _HEADER_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise ValueError(f"spill object {key}: header kind {shown(kind)} is not one of "
                         f"{list(KINDS)}")
    if raw.keys() != fields:
        odd = sorted(raw.keys() ^ fields)
        raise ValueError(f"spill object {key}: header fields {shown(odd)} missing or unknown")
    queue, errors = raw["queue"], raw["errors"]
    if not isinstance(queue, str):
        raise ValueError(f"spill object {key}: header queue must be a string")
    if not isinstance(errors, list) or not all(
            isinstance(text, str) and len(text) <= MAX_ERROR_CHARS for text in errors):
        raise ValueError(f"spill object {key}: header errors must be a list of strings of "
                         f"at most {MAX_ERROR_CHARS} characters")
    return SpillHeader(
        queue=queue, kind=str(kind),
        priority=check_int(raw["priority"], f"spill object {key}: header priority",
                           -MAX_PRIORITY, MAX_PRIORITY) if kind == PENDING else None,
        count=check_int(raw["count"], f"spill object {key}: header count", 1, MAX_SPILL_JOBS),
        errors=tuple(errors))


def stored_kind(ref: SpillSource) -> str:
    """The kind of the object ``ref`` names (a dead object redriven by
    reference is still a dead object)."""
    return DEAD if ref.kind == DEAD or ref.reset_ms is not None else PENDING


def check_spill(data: bytes, ref: SpillSource) -> SpillHeader:
    """Check that ``data`` is the spill object ``ref`` describes: its header
    agrees with the ref (the queue and kind of its key, the kind, a pending
    object's priority, the count) and it holds exactly ``ref.count`` job
    lines, each ended by a line break. ``ValueError`` naming the key
    otherwise. (The etag is the store's to check.)"""
    key = ref.key
    header = read_header(data, key)
    parsed = parse_spill_key(key)
    if parsed is None:
        raise ValueError(f"spill object {key}: not a spill object key")
    kind = stored_kind(ref)
    odd = [name for name, got, want in (
        ("queue", header.queue, parsed[0]),
        ("kind", header.kind, kind),
        ("the kind its key names", parsed[1], kind),
        ("priority", header.priority, ref.priority if kind == PENDING else None),
        ("count", header.count, ref.count)) if got != want]
    if odd:
        raise ValueError(f"spill object {key}: header disagrees with the queue's reference "
                         f"on {', '.join(odd)}")
    if not data.endswith(b"\n"):
        raise ValueError(f"spill object {key} is truncated: its last line has no line break")
    lines = data.count(b"\n") - 1
    if lines != ref.count:
        why = "is truncated" if lines < ref.count else "has extra lines"
        raise ValueError(f"spill object {key} {why}: {lines} job lines, "
                         f"the reference says {ref.count}")
    return header


def parse_line(line: bytes, header: SpillHeader, where: str) -> SpilledJob:
    """The job of one line of a spill object with ``header``, checked: exactly
    the fields of its kind, each in range, ``err`` indexes within the
    header's table, the payload (last, kept verbatim) JSON. ``ValueError``
    naming ``where`` (the object and line) otherwise; never quoting a value
    of the line."""
    at = line.find(_PAYLOAD)
    if at < 0 or not line.endswith(b"}"):
        raise ValueError(f"{where}: not a job line (its payload must come last)")
    try:
        raw = orjson.loads(line[:at] + b"}")
    except orjson.JSONDecodeError:
        raise ValueError(f"{where}: not a JSON object") from None
    payload = line[at + len(_PAYLOAD):-1]
    try:
        wire.loads(payload)
    except ValueError:
        raise ValueError(f"{where}: its payload is not JSON") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: not a JSON object")
    fields = _LINE_FIELDS | {"priority"} if header.kind == DEAD else _LINE_FIELDS
    if not fields <= raw.keys() or not raw.keys() - fields <= _OPTIONAL_FIELDS:
        odd = sorted((raw.keys() ^ fields) - _OPTIONAL_FIELDS)
        raise ValueError(f"{where}: fields {shown(odd)} missing or unknown")
    seq = check_int(raw["seq"], where, 1, SEQ_MASK, ": seq")
    if raw["id"] != job_id_for(seq):
        raise ValueError(f"{where}: id {shown(raw['id'])} is not the id of seq {seq}")
    key = raw.get("key")
    if key is not None and not isinstance(key, str):
        raise ValueError(f"{where}: key must be a string")
    job = SpilledJob(
        seq=seq, payload=payload,
        priority=header.priority if header.priority is not None else raw["priority"],
        run_at_ms=check_time(raw["run_at"], where, ": run_at"),
        attempts=raw["attempts"], max_attempts=raw["max_attempts"],
        created_ms=check_time(raw["created_at"], where, ": created_at"),
        key=key,
        errors=_errors_from(raw["err"], header.errors, where) if "err" in raw else ())
    _check_counts(job, header.kind, where)
    return job


def _errors_from(raw: Any, table: tuple[str, ...], where: str) -> tuple[ErrorEntry, ...]:
    """A line's ``err`` (present: a job with no history has none), its texts from ``table``."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: err must be a non-empty list")
    if len(raw) > ERRORS_KEPT:
        raise ValueError(f"{where}: {len(raw)} errors kept; at most {ERRORS_KEPT}")
    out = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, list) or len(entry) != 3:
            raise ValueError(f"{where}: err[{i}] must be [attempt, failed_at, index]")
        attempt, failed_at, index = entry
        # (check_int's test inline: the named call only for its message)
        if type(index) is not int or not 0 <= index < len(table):
            check_int(index, f"{where}: err[{i}] index", 0, len(table) - 1)
        if type(attempt) is not int or not 1 <= attempt <= MAX_ATTEMPTS:
            check_int(attempt, f"{where}: err[{i}] attempt", 1, MAX_ATTEMPTS)
        # (i < ERRORS_KEPT: the length is checked above)
        out.append(ErrorEntry(attempt, check_time(failed_at, where, _FAILED_AT[i]),
                              table[index]))
    return tuple(out)


def spill_jobs(data: bytes, ref: SpillSource, start: int | None = None,
               stop: int | None = None) -> list[SpilledJob]:
    """The jobs at positions ``start`` to ``stop`` (0 is the first line after the
    header; default: the untaken ones, ``ref.taken`` to ``ref.count``) of spill
    object ``data``, checked (:func:`check_spill`, :func:`parse_line`; seqs
    within the ref's bounds, lines in the object's order, line 0 agreeing
    with the ref's ``first``), as the ref describes them: a dead object's
    jobs redriven by reference are pending, with no attempts, due at its
    ``reset_ms``. Positions the ref took ``out`` are included: skipping them
    is the caller's (:mod:`broker.model.format.spill_refs`).

    Reads lazily: the object is split only up to ``stop``. ``ValueError``
    naming the key and line for any disagreement, or for a window outside
    ``[0, ref.count]``.
    """
    key = ref.key
    header = check_spill(data, ref)
    lo = ref.taken if start is None else start
    hi = ref.count if stop is None else stop
    if not 0 <= lo <= hi <= ref.count:
        raise ValueError(f"spill object {key}: window [{lo}, {hi}) is outside [0, {ref.count}]")
    if lo == hi:
        return []
    order = _order(header.kind)
    low, high = ref.seqs
    jobs: list[SpilledJob] = []
    for position, line in enumerate(data.split(b"\n", hi + 1)[lo + 1:hi + 1], lo):
        where = f"spill object {key}: line {position + 2}"
        job = parse_line(line, header, where)
        if not low <= job.seq <= high:
            raise ValueError(f"{where}: seq {job.seq} is outside the reference's "
                             f"[{low}, {high}]")
        if jobs and order(job) <= order(jobs[-1]):
            raise ValueError(f"{where}: out of order (a {header.kind} object's lines are "
                             + ("by run_at, then seq)" if header.kind == PENDING
                                else "by priority, higher first, then seq)"))
        if position == 0 and ref.first is not None and (job.priority, job.seq) != ref.first:
            raise ValueError(f"{where}: the first job is not the reference's first "
                             f"{list(ref.first)}")
        jobs.append(job)
    if ref.kind == PENDING and ref.reset_ms is not None:
        reset_ms = ref.reset_ms
        return [job.redriven(reset_ms) for job in jobs]
    return jobs


def read_checked(ref: SpillSource, data: bytes | None, etag: str | None, store_url: str,
                 start: int | None = None, stop: int | None = None) -> list[SpilledJob]:
    """:func:`spill_jobs` of what a read of ``ref.key`` gave: the object's
    ``data`` and ``etag``, or None for both if it was not found. ``store_url``
    (the store's URL, without credentials) and the key name the object in
    errors.

    Raises :class:`~broker.errors.SegmentMissing` (``segment_missing``) if the
    object is missing or its etag is not ``ref.etag`` (a job is never
    silently skipped), and :class:`~broker.errors.CorruptState`
    (``corrupt_state``) if its bytes disagree with the reference or the
    window is outside ``[0, ref.count]``. The broker and the Spark reader
    both read spill objects through this one check."""
    parsed = parse_spill_key(ref.key)
    queue = parsed[0] if parsed is not None else "?"
    check_object_version("spill object", queue, ref.key, ref.etag,
                         None if data is None else etag, store_url)
    assert data is not None
    try:
        return spill_jobs(data, ref, start, stop)
    except ValueError as exc:
        raise CorruptState(f"{store_url}: {exc}") from None
