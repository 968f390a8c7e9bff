"""A segment object's bytes: written (:func:`encode_segment`), checked and read
(:func:`segment_lines`, :func:`read_checked`); and the JSON of the head's
reference to one (:func:`ref_to_json`, :func:`ref_from_json`). Pure: bytes
and values in, bytes and values out. What a segment is and how the head
refers to one: :mod:`broker.model.segments`.

A segment object (key from :func:`broker.paths.segment_key`) holds pending jobs
with consecutive seqs that share a priority, a due time, a creation time and
``max_attempts``, in seq order. Version 2 is a header line, then each job's
payload, one a line (each line readable with ``jq`` on its own)::

    {"format":"osqueue-segment","version":2,"queue":"q","first_seq":1,"count":2,"priority":0,"run_at":"2026-11-22T03:43:47.123Z","created_at":"2026-11-22T03:43:47.123Z","max_attempts":3}
    {"doc":1}
    {"doc":2}

The payload on line ``k + 2`` (``k`` from 0) is the job of seq ``first_seq + k``,
id ``"j"`` and that seq in ten digits, with no attempts and the header's
other fields. Reading a window makes each job's line as the queue object
would hold it (:func:`segment_lines`, from
:func:`broker.model.job_lines.pending_format`), so a job taken from a segment
enters the head exactly as if it had been pushed inline; writing one is a
join of its payloads (a million jobs in about 20 ms; each job line written
out whole cost about 25 times that, and 4 times the bytes:
``bench/spark_bench.py``, the write row).

Version 3 is version 2 with a directory of the jobs' groups in the header,
written only for a segment in which some job has a group (an ungrouped
segment is still version 2, byte for byte). The jobs are group-major: each
group's jobs are one run of consecutive positions, in push order, and
``"groups"`` lists the runs in position order as ``[group or null, count]``
(a group at most once, counts at least 1 and summing to ``count``; run ``r``
starts at the sum of the counts before it)::

    {"format":"osqueue-segment","version":3,...,"max_attempts":3,"groups":[["tenantA",2],[null,1]]}

Version 3 is not yet written by the broker (claims do not yet take grouped
jobs from segments): this module writes and checks it (:func:`encode_segment`
with ``groups``, :func:`read_header`, :func:`read_directory`), and a reference
to a grouped segment (``"groups"``: its number of runs; ``"taken_at"``: its
taken positions as runs, :func:`check_taken_at`) has its JSON here, but the
decoder still refuses grouped references and :func:`segment_lines` refuses to read a
grouped segment's jobs. A broker before version 3 refuses such an object as
a version it does not read.

Version 1 (written until version 2 came) has a header without
``created_at`` and ``max_attempts``, and each job's whole line of the queue
object on its line. It is still read, with every line checked against its
seq and the header; it is never written.

Errors: every refusal is a ``ValueError`` whose message names the segment's
key (and the line or field; a reference's, ``where`` too); payloads are never
quoted. :func:`read_checked`,
the check of a read object that the broker's ``SegmentStore`` and the Spark
reader share, raises ``SegmentMissing`` and ``CorruptState`` instead.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from broker import timefmt
from broker.errors import CorruptState, InvalidRequest, SegmentMissing, shown
from broker.fields import group as group_name
from broker.limits import MAX_ATTEMPTS, MAX_PRIORITY
from broker.model.indexes import SEQ_MASK, TIME_MASK
from broker.model.job import Job
from broker.model.job_lines import pending_format, pending_from_line, stamp_ms
from broker.model.state import SegmentRef
from broker.paths import check_queue_name, parse_segment_key

SEGMENT_FORMAT = "osqueue-segment"
#: The version this broker writes for a segment without groups; it reads 1 too.
SEGMENT_VERSION = 2
#: The version of a segment with a directory of its jobs' groups (only when
#: some job has a group); the newest this broker reads.
GROUPED_SEGMENT_VERSION = 3
#: Longest header line (bytes, its line break not counted) this broker writes
#: or reads: a directory of :data:`MAX_SEGMENT_JOBS` runs of long names fits
#: only this far; a longer line is refused before it is parsed.
MAX_SEGMENT_HEADER_BYTES = 8 * 1024 * 1024
#: Most jobs in one segment: a window is at most one segment, so this bounds
#: what the broker holds per segment it reads (with the byte limit of
#: ``broker.service.by_reference.SEGMENT_MAX_BYTES``).
MAX_SEGMENT_JOBS = 65_536

#: Longest etag (or generation) a reference may carry.
MAX_ETAG_CHARS = 256

_REF_FIELDS = frozenset(
    {"key", "etag", "first_seq", "count", "priority", "run_at", "taken"})
_GROUPED_REF_FIELDS = _REF_FIELDS | {"groups", "taken_at"}
_V1_FIELDS = frozenset(
    {"format", "version", "queue", "first_seq", "count", "priority", "run_at"})
_HEADER_FIELDS = {1: _V1_FIELDS, 2: _V1_FIELDS | {"created_at", "max_attempts"}}
_HEADER_FIELDS[3] = _HEADER_FIELDS[2] | {"groups"}

#: A segment's directory: its runs in position order, ``(group or None, count)``.
Runs = tuple[tuple[str | None, int], ...]
_CREATED = b',"created_at":"'
_PAYLOAD = b'","payload":'
_STAMP_CHARS = len(timefmt.fmt(0))


def check_int(raw: Any, what: str, lo: int, hi: int, suffix: str = "") -> int:
    """``raw`` if it is an int (not a bool) within ``[lo, hi]``; ``ValueError``
    naming ``what`` and ``suffix`` (joined only then) otherwise."""
    if isinstance(raw, bool) or not isinstance(raw, int) or not lo <= raw <= hi:
        raise ValueError(f"{what}{suffix} must be an integer within [{lo}, {hi}], "
                         f"got {shown(raw)}")
    return raw


#: Times read back repeat (a claim's jobs share a run-at, a bad deploy's failures
#: their times): each text parsed once is part of bench/spill_read_bench.py's
#: gain. Refusals raise, so they are not cached.
_parsed_time = functools.lru_cache(maxsize=1 << 12)(timefmt.parse)


def check_time(raw: Any, what: str, suffix: str = "") -> int:
    """The ms of time text ``raw`` (as :func:`broker.timefmt.fmt` writes it, from
    1970 to 9999); ``ValueError`` naming ``what`` and ``suffix`` (as
    :func:`check_int`) otherwise."""
    if not isinstance(raw, str):
        raise ValueError(f"{what}{suffix} must be a time string, got {shown(raw)}")
    try:
        ms = _parsed_time(raw)
    except ValueError:
        raise ValueError(f"{what}{suffix} {shown(raw)} is not a time") from None
    if not 0 <= ms <= TIME_MASK:
        raise ValueError(f"{what}{suffix} {shown(raw)} is before 1970 or after 9999")
    return ms


def encode_segment(queue: str, first_seq: int, priority: int, run_at_ms: int,
                   payloads: Sequence[bytes], *, max_attempts: int,
                   created_ms: int | None = None,
                   groups: Sequence[tuple[str | None, int]] | None = None) -> bytes:
    """The bytes of a segment of ``queue``: a header line, then one payload a
    line (JSON bytes, as checked at push or staging), seqs ``first_seq``
    onwards, due at ``run_at_ms`` and created at ``created_ms`` (default:
    ``run_at_ms``, as a bulk push or publish makes them).

    Version 2 without ``groups``; version 3 with them: the directory of the
    payloads' groups, ``(group or None, count)`` runs in position order (the
    payloads already group-major: :func:`broker.model.groups.directories.group_major`),
    checked as :func:`read_header` checks a read one.

    ``ValueError`` for no payloads, an empty payload, a payload holding a line
    break (it would split its line), a field out of range, or a directory
    :func:`read_header` would refuse (a bad name, a count below 1, a group
    twice, counts not summing to the jobs, no named group, or a header over
    :data:`MAX_SEGMENT_HEADER_BYTES`).
    """
    try:
        check_queue_name(queue)
    except InvalidRequest as exc:
        raise ValueError(str(exc)) from None
    count = len(payloads)
    check_int(count, f"segment of {queue!r}: job count", 1, MAX_SEGMENT_JOBS)
    check_int(first_seq, f"segment of {queue!r}: first_seq", 1, SEQ_MASK - count + 1)
    check_int(priority, f"segment of {queue!r}: priority", -MAX_PRIORITY, MAX_PRIORITY)
    check_int(run_at_ms, f"segment of {queue!r}: run_at_ms", 0, TIME_MASK)
    check_int(max_attempts, f"segment of {queue!r}: max_attempts", 1, MAX_ATTEMPTS)
    created = run_at_ms if created_ms is None else check_int(
        created_ms, f"segment of {queue!r}: created_ms", 0, TIME_MASK)
    head: dict[str, Any] = {
        "format": SEGMENT_FORMAT, "version": SEGMENT_VERSION, "queue": queue,
        "first_seq": first_seq, "count": count, "priority": priority,
        "run_at": timefmt.fmt(run_at_ms), "created_at": timefmt.fmt(created),
        "max_attempts": max_attempts}
    if groups is not None:
        runs = check_runs(groups, count, f"segment of {queue!r}: groups")
        head["version"] = GROUPED_SEGMENT_VERSION
        head["groups"] = [list(run) for run in runs]
    header = orjson.dumps(head)
    if len(header) > MAX_SEGMENT_HEADER_BYTES:
        raise ValueError(f"segment of {queue!r}: header of {len(header)} bytes is over "
                         f"{MAX_SEGMENT_HEADER_BYTES} (group names too long for one segment)")
    body = b"\n".join(payloads)
    if body.count(b"\n") != count - 1:  # one pass in C, not one test per payload
        bad = next(i for i, payload in enumerate(payloads) if b"\n" in payload)
        raise ValueError(f"segment of {queue!r}: payload {bad} holds a line break")
    if not all(payloads):
        raise ValueError(f"segment of {queue!r}: payload {payloads.index(b'')} is empty")
    return b"".join((header, b"\n", body, b"\n"))


def check_runs(raw: Any, count: int, what: str) -> Runs:
    """``raw`` as a segment's directory of ``count`` jobs (``[group or None,
    count]`` runs in position order; JSON lists or tuples), checked: a non-empty
    list of pairs, each name per the one rule (:func:`broker.fields.group`) or
    None, each count within ``[1, count]``, a group (or None) at most once,
    the counts summing to ``count``, and some run named (a directory of no
    group is a version-2 segment). ``ValueError`` naming ``what`` (the object
    and its field) and the run index; a name is quoted at most by
    :func:`~broker.errors.shown`."""
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ValueError(f"{what} must be a non-empty list of [group, count] runs")
    runs: list[tuple[str | None, int]] = []
    first: dict[str | None, int] = {}
    end = 0
    for r, run in enumerate(raw):
        if not isinstance(run, (list, tuple)) or len(run) != 2:
            raise ValueError(f"{what}[{r}] must be a [group, count] pair")
        name, n = run
        if name is not None:
            try:
                group_name(f"{what}[{r}]", name)
            except InvalidRequest as exc:
                raise ValueError(str(exc)) from None
        n = check_int(n, f"{what}[{r}] count", 1, count)
        seen = first.setdefault(name, r)
        if seen != r:
            raise ValueError(f"{what}[{r}] names group {shown(name)} again "
                             f"(first at run {seen}): a group is one run")
        end += n
        if end > count:
            raise ValueError(f"{what}[{r}] ends at position {end}, past the {count} jobs")
        runs.append((name, n))
    if end != count:
        raise ValueError(f"{what}[{len(runs) - 1}] ends at position {end}, "
                         f"short of the {count} jobs")
    if list(first) == [None]:
        raise ValueError(f"{what}[0] is the only run and has no group: a segment "
                         "without groups is version 2")
    return tuple(runs)


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """A segment object's first line, checked (see :func:`read_header`).
    ``created_ms`` and ``max_attempts`` are None in a version-1 header (its
    lines carry them); ``groups`` (the directory, :data:`Runs`) is None below
    version 3."""

    queue: str
    first_seq: int
    count: int
    priority: int
    run_at_ms: int
    version: int = SEGMENT_VERSION
    created_ms: int | None = None
    max_attempts: int | None = None
    groups: Runs | None = None


def header_object(data: bytes, what: str, fmt: str) -> dict[str, Any]:
    """The first line of an object of format ``fmt`` as a JSON object; ``ValueError``
    naming ``what`` (the object, as errors name it) if there is no such line, it is
    not JSON, or it names another format. Shared by segment and spill objects."""
    end = data.find(b"\n")
    if end < 0:
        raise ValueError(f"{what}: no header line (truncated object?)")
    try:
        raw = orjson.loads(data[:end])
    except orjson.JSONDecodeError:
        raise ValueError(f"{what}: the header line is not JSON") from None
    if not isinstance(raw, dict) or raw.get("format") != fmt:
        raise ValueError(f"{what}: not an {fmt} object")
    return raw


def read_header(data: bytes, key: str) -> SegmentHeader:
    """The checked header of segment object ``data`` (read from ``key``, named
    in errors). ``ValueError`` for a first line that is not the header of a
    segment this broker reads (another format, a newer version, a missing,
    extra or mistyped field, a header line over :data:`MAX_SEGMENT_HEADER_BYTES`,
    a version-3 directory :func:`check_runs` refuses). Only the first line
    is read, so ``data`` may be a prefix of the object that holds it."""
    end = data.find(b"\n", 0, MAX_SEGMENT_HEADER_BYTES + 1)
    if end < 0 and len(data) > MAX_SEGMENT_HEADER_BYTES:
        raise ValueError(f"segment {key}: the header line is over "
                         f"{MAX_SEGMENT_HEADER_BYTES} bytes")
    raw = header_object(data, f"segment {key}", SEGMENT_FORMAT)
    version = raw.get("version")
    names = _HEADER_FIELDS.get(version) if type(version) is int else None
    if names is None:
        raise ValueError(f"segment {key}: version {shown(version)}; this broker reads "
                         f"versions 1 to {GROUPED_SEGMENT_VERSION}")
    if raw.keys() != names:
        odd = sorted(raw.keys() ^ names)
        raise ValueError(f"segment {key}: header fields {shown(odd)} missing or unknown")
    queue = raw["queue"]
    if not isinstance(queue, str):
        raise ValueError(f"segment {key}: header queue must be a string")
    assert isinstance(version, int)
    v2 = version >= 2
    count = check_int(raw["count"], f"segment {key}: header count", 1, MAX_SEGMENT_JOBS)
    return SegmentHeader(
        queue=queue,
        first_seq=check_int(raw["first_seq"], f"segment {key}: header first_seq", 1, SEQ_MASK),
        count=count,
        priority=check_int(raw["priority"], f"segment {key}: header priority",
                           -MAX_PRIORITY, MAX_PRIORITY),
        run_at_ms=check_time(raw["run_at"], f"segment {key}: header run_at"),
        version=version,
        created_ms=check_time(raw["created_at"], f"segment {key}: header created_at")
        if v2 else None,
        max_attempts=check_int(raw["max_attempts"], f"segment {key}: header max_attempts",
                               1, MAX_ATTEMPTS) if v2 else None,
        groups=check_runs(raw["groups"], count, f"segment {key}: header groups")
        if version >= GROUPED_SEGMENT_VERSION else None)


def read_directory(prefix: bytes, key: str, ref: SegmentRef | None = None) -> Runs:
    """The directory of grouped segment ``key`` from ``prefix``, the start of
    the object holding at least its header line (a ranged read: up to
    :data:`MAX_SEGMENT_HEADER_BYTES` and its line break), checked as
    :func:`read_header` checks it and, given ``ref``, against the reference
    (the fields :func:`check_segment` compares, and ``ref.groups``, its number
    of runs). ``ValueError`` naming the key for a prefix without a whole header
    line (read more), a segment without groups, or any disagreement."""
    header = read_header(prefix, key)
    if header.groups is None:
        raise ValueError(f"segment {key} (version {header.version}) has no group directory")
    if ref is not None:
        _check_agrees(header, ref)
    return header.groups


_AGREES_WITH_REF = ("queue", "first_seq", "count", "priority", "run_at_ms")


def _check_agrees(header: SegmentHeader, ref: SegmentRef) -> None:
    expected = (ref.queue, ref.first_seq, ref.count, ref.priority, ref.run_at_ms)
    odd = [name for name, want in zip(_AGREES_WITH_REF, expected, strict=True)
           if getattr(header, name) != want]
    if ref.groups != (None if header.groups is None else len(header.groups)):
        odd.append("groups")
    if odd:
        raise ValueError(f"segment {ref.key}: header disagrees with the queue's reference "
                         f"on {', '.join(odd)}")


def check_segment(data: bytes, ref: SegmentRef) -> SegmentHeader:
    """Check that ``data`` is the segment ``ref`` describes: its header agrees
    with the ref (queue of the key, first seq, count, priority, due time, and
    whether it is grouped, with how many runs) and
    it holds exactly ``ref.count`` job lines, each ended by a line break.
    ``ValueError`` naming the key otherwise. (The etag is the store's to check:
    the read that gave ``data`` must be of ``ref.etag``.)"""
    key = ref.key
    header = read_header(data, key)
    _check_agrees(header, ref)
    lines = data.count(b"\n") - 1
    if not data.endswith(b"\n"):
        raise ValueError(f"segment {key} is truncated: its last line has no line break")
    if lines != ref.count:
        why = "is truncated" if lines < ref.count else "has extra lines"
        raise ValueError(f"segment {key} {why}: {lines} job lines, "
                         f"the reference says {ref.count}")
    return header


def segment_lines(data: bytes, ref: SegmentRef, start: int | None = None,
                  stop: int | None = None) -> list[bytes]:
    """The lines of the jobs at positions ``start`` to ``stop`` (0 is the first
    job; default: the untaken ones, ``ref.taken`` on; of a grouped segment all:
    the caller skips ``ref.taken_at``, :func:`~broker.model.segments.refs.untaken_spans`)
    of segment ``data`` (any version), checked (:func:`check_segment`; no empty
    line; a version-1 line must be the pending job line of its expected seq with the
    ref's priority and due time), in the head's form: with the leading
    ``,\\n`` of a line of the queue object (a grouped job's with its ``"group"``).

    Reads lazily: the object is split only up to ``stop``. Payload bytes are
    not parsed: they were checked when pushed or staged, and the etag vouches
    that the object is the one the broker wrote. ``ValueError`` naming the
    key and line for any disagreement, or for a window outside ``[0, ref.count]``.
    """
    header = check_segment(data, ref)
    lo = (ref.taken if header.groups is None else 0) if start is None else start
    hi = ref.count if stop is None else stop
    if not 0 <= lo <= hi <= ref.count:
        raise ValueError(f"segment {ref.key}: window [{lo}, {hi}) is outside [0, {ref.count}]")
    if lo == hi:
        return []
    # (the split copies the rest of the object once: segments are bounded,
    # MAX_SEGMENT_JOBS)
    parts = data.split(b"\n", hi + 1)[lo + 1:hi + 1]
    first = ref.first_seq + lo
    if header.version == 1:
        return _v1_lines(parts, first, ref)
    if not all(parts):
        raise ValueError(f"segment {ref.key}: line {parts.index(b'') + lo + 2} is empty")
    assert header.created_ms is not None and header.max_attempts is not None
    line = b",\n" + pending_format(ref.priority, ref.run_at_ms, header.created_ms,
                                   header.max_attempts)
    if header.groups is None:
        seqs = range(first, first + len(parts))
        return list(map(line.__mod__, zip(seqs, seqs, parts, strict=True)))
    out: list[bytes] = []
    at = 0
    for name, n in header.groups:  # (a run's lines share their template)
        a, b = max(lo, at), min(hi, at + n)
        if a < b:
            fmt = line if name is None else line.replace(_PAYLOAD_FIELD, b',"group":' + (
                orjson.dumps(name).replace(b"%", b"%%")) + _PAYLOAD_FIELD, 1)
            seqs = range(ref.first_seq + a, ref.first_seq + b)
            out += map(fmt.__mod__, zip(seqs, seqs, parts[a - lo:b - lo], strict=True))
        at += n
        if at >= hi:
            break
    return out


_PAYLOAD_FIELD = b',"payload":'


def _v1_lines(parts: list[bytes], first: int, ref: SegmentRef) -> list[bytes]:
    """:func:`segment_lines` of the job lines ``parts`` of a version-1 segment."""
    shared = _shared_part(parts[0], first, ref)
    out = []
    for seq, line in enumerate(parts, first):
        ids = b'{"id":"j%010d","seq":%d,' % (seq, seq)
        if shared is None or not line.startswith(ids) or not line.startswith(
                shared, len(ids)) or len(line) <= len(ids) + len(shared) + 1 \
                or not line.endswith(b"}"):
            raise ValueError(f"segment {ref.key}: line {seq - ref.first_seq + 2} is not "
                             f"the pending job of seq {seq} the reference describes")
        out.append(b",\n" + line)
    return out


def _shared_part(line: bytes, seq: int, ref: SegmentRef) -> bytes | None:
    """What every job line of a version-1 segment holds between its seq and its
    payload (``"status":"pending",...,"payload":``), checked on ``line`` (the job of
    ``seq``): status, the ref's priority and due time, no attempts, a
    max_attempts in range and a creation time. None if ``line`` is not such
    a line. (Version 1 has one max_attempts and creation time per segment,
    so each further line is checked by two ``startswith``.)"""
    ids = b'{"id":"j%010d","seq":%d,' % (seq, seq)
    fields = b'"status":"pending","priority":%d,"run_at":"%s","attempts":0,"max_attempts":' % (
        ref.priority, timefmt.fmt_bytes(ref.run_at_ms))
    if not line.startswith(ids + fields):
        return None
    at = len(ids) + len(fields)
    comma = line.find(_CREATED, at)
    digits = line[at:comma]
    if comma < 0 or not digits.isdigit() or not 1 <= int(digits) <= MAX_ATTEMPTS \
            or (len(digits) > 1 and digits[0] == 48):  # (48: "0")
        return None
    stamp_at = comma + len(_CREATED)
    end = stamp_at + _STAMP_CHARS + len(_PAYLOAD)
    if line[end - len(_PAYLOAD):end] != _PAYLOAD:
        return None
    try:
        stamp_ms(line[stamp_at:stamp_at + _STAMP_CHARS])
    except ValueError:
        return None
    return line[len(ids):end]


def segment_job(seq: int, line: bytes, ref: SegmentRef) -> Job:
    """The pending :class:`~broker.model.job.Job` of seq ``seq`` that a line of
    :func:`segment_lines` for ``ref`` describes, with the line as its cached
    encoding (it is the job's line as it stands)."""
    at = line.index(_CREATED, 30) + len(_CREATED)
    job = pending_from_line(seq, line)  # (its group too; priority 0, created when due: set below)
    job.priority = ref.priority
    job.created_ms = stamp_ms(line[at:at + _STAMP_CHARS])
    return job


def check_version(ref: SegmentRef, etag: str | None, store_url: str) -> None:
    """Raise :class:`~broker.errors.SegmentMissing` naming the object unless
    ``etag`` (what the store has under ``ref.key``; None: nothing) is ``ref.etag``."""
    check_object_version("segment", ref.queue, ref.key, ref.etag, etag, store_url)


def check_object_version(what: str, queue: str, key: str, want: str, etag: str | None,
                         store_url: str) -> None:
    """Raise :class:`~broker.errors.SegmentMissing` naming ``what`` object (e.g.
    ``"segment"``, ``"spill object"``) ``key`` of ``queue`` unless ``etag`` (what
    the store has under ``key``; None: nothing) is ``want``, the reference's."""
    where = f"{store_url}/{key}"
    if etag is None:
        raise SegmentMissing(f"queue {queue!r} references {what} {where}, which is "
                             "missing (deleted behind the broker's back?)")
    if etag != want:
        raise SegmentMissing(
            f"queue {queue!r} references {what} {where} at etag {shown(want)}, but "
            f"the object has etag {shown(etag)} (rewritten behind the broker's back?)")


def read_checked(ref: SegmentRef, data: bytes | None, etag: str | None, store_url: str,
                 start: int | None = None, stop: int | None = None) -> list[bytes]:
    """:func:`segment_lines` of what a read of ``ref.key`` gave: the object's
    ``data`` and ``etag``, or None for both if it was not found. ``store_url``
    (the store's URL, without credentials) and the key name the object in errors.

    Raises :class:`~broker.errors.SegmentMissing` if the object is missing or
    its etag is not ``ref.etag`` (a job is never silently skipped), and
    ``CorruptState`` if its bytes disagree with the reference or the window is
    outside ``[0, ref.count]``. The broker and the Spark reader both read
    segments through this one check."""
    check_version(ref, None if data is None else etag, store_url)
    assert data is not None
    try:
        return segment_lines(data, ref, start, stop)
    except ValueError as exc:
        raise CorruptState(f"{store_url}: {exc}") from None


# -- the head's references to segments ---------------------------------------------


def ref_to_json(ref: SegmentRef) -> dict[str, Any]:
    """The ref as the head's ``"segments"`` list holds it (times as text, for jq).
    A grouped ref adds ``"groups"`` and, once something is taken, ``"taken_at"``
    (an ungrouped ref's JSON is as it always was)."""
    out = {"key": ref.key, "etag": ref.etag, "first_seq": ref.first_seq, "count": ref.count,
           "priority": ref.priority, "run_at": timefmt.fmt(ref.run_at_ms), "taken": ref.taken}
    if ref.groups is not None:
        out["groups"] = ref.groups
        if ref.taken_at:
            out["taken_at"] = list(ref.taken_at)
    return out


def ref_bytes(ref: SegmentRef) -> bytes:
    """The ref's line in the head: :func:`ref_to_json`, compact."""
    return orjson.dumps(ref_to_json(ref))


def check_taken_at(raw: Any, count: int, taken: int, what: str) -> tuple[int, ...]:
    """``raw`` as a grouped ref's ``taken_at`` (its taken positions as runs
    ``[from, n, from, n, ...]``) of a segment of ``count`` jobs of which
    ``taken`` are taken, checked: a non-empty list of int pairs, each run
    within ``[0, count)`` and ``n >= 1``, ascending, disjoint and coalesced (a
    run starts past the end of the one before, never at it), the ``n`` summing
    to ``taken``. ``ValueError`` naming ``what`` and the run's index otherwise.
    (Cost: one pass; the list has at most ``count // 2 + 1`` runs.)"""
    if not isinstance(raw, list) or not raw or len(raw) % 2:
        raise ValueError(f"{what} must be a non-empty list of [from, count] pairs, flat")
    end = -1  # (no run before the first: position 0 may start one)
    total = 0
    for i in range(0, len(raw), 2):
        start = check_int(raw[i], f"{what} run {i // 2} from", 0, count - 1)
        if start <= end:
            why = "touches" if start == end else "overlaps or comes before"
            raise ValueError(f"{what} run {i // 2} {why} the run before it "
                             "(runs are ascending, disjoint and coalesced)")
        n = check_int(raw[i + 1], f"{what} run {i // 2} count", 1, count - start)
        end = start + n
        total += n
    if total != taken:
        raise ValueError(f"{what} counts {total} taken positions, the reference says {taken}")
    return tuple(raw)


def ref_from_json(raw: Any, where: str, *, grouped_ok: bool = False) -> SegmentRef:
    """A ref from its JSON (:func:`ref_to_json`), checked: exactly its fields,
    a key :func:`broker.paths.segment_key` makes whose seq is ``first_seq``, a
    short printable etag, counts in range and ``taken <= count``. ``ValueError``
    naming ``where`` (e.g. ``"queue q: segments[3]"``) otherwise.

    A grouped ref (``"groups"``, and ``"taken_at"`` while ``taken > 0``:
    :func:`check_taken_at`) is read only with ``grouped_ok``; without it its
    fields are unknown, as to a broker before groups."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: a segment reference must be an object")
    names = _REF_FIELDS
    if grouped_ok and ("groups" in raw or "taken_at" in raw):
        names = _GROUPED_REF_FIELDS if raw.get("taken") != 0 else _REF_FIELDS | {"groups"}
    if raw.keys() != names:
        odd = sorted(raw.keys() ^ names)
        raise ValueError(f"{where}: segment reference fields {shown(odd)} missing or unknown")
    key, etag = raw["key"], raw["etag"]
    parsed = parse_segment_key(key)
    if parsed is None:
        raise ValueError(f"{where}: {shown(key)} is not a segment key")
    if not isinstance(etag, str) or not 0 < len(etag) <= MAX_ETAG_CHARS or \
            not etag.isprintable():
        raise ValueError(f"{where}: segment {key} has etag {shown(etag)}; it must be "
                         f"1-{MAX_ETAG_CHARS} printable characters")
    count = check_int(raw["count"], f"{where}: segment {key} count", 1, MAX_SEGMENT_JOBS)
    first_seq = check_int(raw["first_seq"], f"{where}: segment {key} first_seq",
                     1, SEQ_MASK - count + 1)
    if first_seq != parsed[1]:
        raise ValueError(f"{where}: segment {key} has first_seq {first_seq}, "
                         "but its key names another")
    taken = check_int(raw["taken"], f"{where}: segment {key} taken", 0, count)
    groups: int | None = None
    taken_at: tuple[int, ...] = ()
    if "groups" in names:
        groups = check_int(raw["groups"], f"{where}: segment {key} groups", 1, count)
        if taken:
            taken_at = check_taken_at(raw["taken_at"], count, taken,
                                      f"{where}: segment {key} taken_at")
    return SegmentRef(
        key=key, etag=etag, first_seq=first_seq, count=count,
        priority=check_int(raw["priority"], f"{where}: segment {key} priority",
                      -MAX_PRIORITY, MAX_PRIORITY),
        run_at_ms=check_time(raw["run_at"], f"{where}: segment {key} run_at"),
        taken=taken, groups=groups, taken_at=taken_at)
