"""Segments: immutable objects of pending jobs that the queue object refers to
instead of holding their jobs (issue 20: deep queues). Pure: bytes and values
in, bytes and values out; the time is passed in.

The broker writes them (:mod:`broker.service.by_reference`), takes jobs from
them in claim order (:mod:`broker.model.segment_claims`), and reads them
through :func:`read_checked`, as the Spark reader does. (Not to be confused
with the codec's encoding cache, also called segments in
``QueueState.segments``: runs of 1,024 seqs of the object's own lines.)

A segment object (key from :func:`broker.paths.segment_key`) holds pending jobs
with consecutive seqs that share a priority and a due time, in seq order, as
JSON lines (each line readable with ``jq`` on its own)::

    {"format":"osqueue-segment","version":1,"queue":"q","first_seq":1,"count":2,"priority":0,"run_at":"2026-11-22T03:43:47.123Z"}
    {"id":"j0000000001","seq":1,"status":"pending","priority":0,"run_at":"2026-...","attempts":0,"max_attempts":3,"created_at":"2026-...","payload":{...}}
    {"id":"j0000000002","seq":2,"status":"pending",...}

Each job line is byte for byte the job's line in the queue object without
its leading ``,\\n`` (both come from :func:`broker.model.lines.pending_format`),
so a job taken from a segment enters the head as the line it would have had
inline (:func:`segment_lines` gives it in that form; :func:`segment_job` makes
its :class:`~broker.model.job.Job`).

The head keeps a :class:`SegmentRef` per segment: where it is, which version
(etag), its seqs, priority and due time, and a cursor (``taken``): the jobs
before it have moved into the head (claimed), the rest are pending. A segment
is never rewritten: taking jobs advances the cursor in the head (:func:`take`).

Claim order is the queue's (priority, higher first; then run-at; then seq):
:func:`next_from` picks between the inline ready heap's head and each due
segment's next job, :func:`run_from` says how many jobs in a row one source
gives before another comes first.

Purge and redrive: a segment holds pending jobs only, so redrive (of dead
jobs) never concerns one, and a purge of pending jobs drops every reference
(:func:`purge_segments`); the dropped objects are deleted only after the
commit that dropped them has landed (as archive objects are written only
after theirs), and a segment no landed commit references is swept. A purge
or change of single jobs inside a segment is not supported: a segment holds
pending jobs with default options only, and the only other change to a
pending job is being claimed, which moves it into the head first.

Errors: every refusal is a ``ValueError`` whose message names the segment's
key (and the line or field); payloads are never quoted. :func:`read_checked`,
the check of a read object that the broker's ``SegmentStore`` and the Spark
reader share, raises ``SegmentMissing`` and ``CorruptState`` instead.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from broker import timefmt
from broker.errors import CorruptState, InvalidRequest, SegmentMissing, shown
from broker.limits import MAX_ATTEMPTS, MAX_PRIORITY
from broker.model.indexes import SEQ_MASK, TIME_MASK, ready_key
from broker.model.job import Job
from broker.model.lines import pending_format, pending_from_line, stamp_ms
from broker.model.state import SegmentRef  # (defined with the state that holds it)
from broker.paths import check_queue_name, parse_segment_key

SEGMENT_FORMAT = "osqueue-segment"
SEGMENT_VERSION = 1
#: The claim-order source :func:`next_from` names for the inline ready heap.
INLINE = -1
#: Longest etag (or generation) a reference may carry.
MAX_ETAG_CHARS = 256
#: Most jobs in one segment: a window is at most one segment, so this bounds
#: what the broker holds per segment it reads (with the byte limit of
#: ``broker.service.by_reference.SEGMENT_MAX_BYTES``).
MAX_SEGMENT_JOBS = 65_536

_HEADER_FIELDS = frozenset(
    {"format", "version", "queue", "first_seq", "count", "priority", "run_at"})
_REF_FIELDS = frozenset(
    {"key", "etag", "first_seq", "count", "priority", "run_at", "taken"})
_CREATED = b',"created_at":"'
_PAYLOAD = b'","payload":'
_STAMP_CHARS = len(timefmt.fmt(0))


# -- the object's bytes ---------------------------------------------------------------


def _int(raw: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not lo <= raw <= hi:
        raise ValueError(f"{what} must be an integer within [{lo}, {hi}], got {shown(raw)}")
    return raw


def _check_queue(queue: str) -> str:
    try:
        return check_queue_name(queue)
    except InvalidRequest as exc:
        raise ValueError(str(exc)) from None


def encode_segment(queue: str, first_seq: int, priority: int, run_at_ms: int,
                   payloads: Sequence[bytes], *, max_attempts: int,
                   created_ms: int | None = None) -> bytes:
    """The bytes of a segment of ``queue``: a header line, then one pending job
    a line for each payload (JSON bytes, as checked at push or staging), seqs
    ``first_seq`` onwards, due at ``run_at_ms`` and created at ``created_ms``
    (default: ``run_at_ms``, as a bulk push or publish makes them).

    ``ValueError`` for no payloads, a payload holding a line break (it would
    split its line), or a field out of range.
    """
    _check_queue(queue)
    count = len(payloads)
    _int(count, f"segment of {queue!r}: job count", 1, MAX_SEGMENT_JOBS)
    _int(first_seq, f"segment of {queue!r}: first_seq", 1, SEQ_MASK - count + 1)
    _int(priority, f"segment of {queue!r}: priority", -MAX_PRIORITY, MAX_PRIORITY)
    _int(run_at_ms, f"segment of {queue!r}: run_at_ms", 0, TIME_MASK)
    _int(max_attempts, f"segment of {queue!r}: max_attempts", 1, MAX_ATTEMPTS)
    created = run_at_ms if created_ms is None else _int(
        created_ms, f"segment of {queue!r}: created_ms", 0, TIME_MASK)
    header = orjson.dumps({
        "format": SEGMENT_FORMAT, "version": SEGMENT_VERSION, "queue": queue,
        "first_seq": first_seq, "count": count, "priority": priority,
        "run_at": timefmt.fmt(run_at_ms)})
    line = pending_format(priority, run_at_ms, created, max_attempts) + b"\n"
    parts = [line % (seq, seq, payload) for seq, payload in enumerate(payloads, first_seq)]
    parts.insert(0, header + b"\n")
    data = b"".join(parts)
    if data.count(b"\n") != count + 1:  # one pass in C, not one test per payload
        bad = next(i for i, payload in enumerate(payloads) if b"\n" in payload)
        raise ValueError(f"segment of {queue!r}: payload {bad} holds a line break")
    return data


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """A segment object's first line, checked (see :func:`read_header`)."""

    queue: str
    first_seq: int
    count: int
    priority: int
    run_at_ms: int


def read_header(data: bytes, key: str) -> SegmentHeader:
    """The checked header of segment object ``data`` (read from ``key``, named
    in errors). ``ValueError`` for a first line that is not the header of a
    segment this broker writes (another format, a newer version, a missing,
    extra or mistyped field)."""
    end = data.find(b"\n")
    if end < 0:
        raise ValueError(f"segment {key}: no header line (truncated object?)")
    try:
        raw = orjson.loads(data[:end])
    except orjson.JSONDecodeError:
        raise ValueError(f"segment {key}: the header line is not JSON") from None
    if not isinstance(raw, dict) or raw.get("format") != SEGMENT_FORMAT:
        raise ValueError(f"segment {key}: not an {SEGMENT_FORMAT} object")
    version = raw.get("version")
    if version != SEGMENT_VERSION:
        raise ValueError(f"segment {key}: version {shown(version)}; this broker reads "
                         f"version {SEGMENT_VERSION} only")
    if raw.keys() != _HEADER_FIELDS:
        odd = sorted(raw.keys() ^ _HEADER_FIELDS)
        raise ValueError(f"segment {key}: header fields {shown(odd)} missing or unknown")
    queue, run_at = raw["queue"], raw["run_at"]
    if not isinstance(queue, str):
        raise ValueError(f"segment {key}: header queue must be a string")
    return SegmentHeader(
        queue=queue,
        first_seq=_int(raw["first_seq"], f"segment {key}: header first_seq", 1, SEQ_MASK),
        count=_int(raw["count"], f"segment {key}: header count", 1, MAX_SEGMENT_JOBS),
        priority=_int(raw["priority"], f"segment {key}: header priority",
                      -MAX_PRIORITY, MAX_PRIORITY),
        run_at_ms=_time(run_at, f"segment {key}: header run_at"))


def _time(raw: Any, what: str) -> int:
    if not isinstance(raw, str):
        raise ValueError(f"{what} must be a time string, got {shown(raw)}")
    try:
        ms = timefmt.parse(raw)
    except ValueError:
        raise ValueError(f"{what} {shown(raw)} is not a time") from None
    if not 0 <= ms <= TIME_MASK:
        raise ValueError(f"{what} {shown(raw)} is before 1970 or after 9999")
    return ms


def check_segment(data: bytes, ref: SegmentRef) -> SegmentHeader:
    """Check that ``data`` is the segment ``ref`` describes: its header agrees
    with the ref (queue of the key, first seq, count, priority, due time) and
    it holds exactly ``ref.count`` job lines, each ended by a line break.
    ``ValueError`` naming the key otherwise. (The etag is the store's to check:
    the read that gave ``data`` must be of ``ref.etag``.)"""
    key = ref.key
    header = read_header(data, key)
    expected = SegmentHeader(ref.queue, ref.first_seq, ref.count, ref.priority, ref.run_at_ms)
    if header != expected:
        odd = [name for name in SegmentHeader.__slots__
               if getattr(header, name) != getattr(expected, name)]
        raise ValueError(f"segment {key}: header disagrees with the queue's reference "
                         f"on {', '.join(odd)}")
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
    job; default: the untaken ones, ``ref.taken`` to ``ref.count``) of segment
    ``data``, checked (:func:`check_segment`, and each line is the pending
    job line of its expected seq with the ref's priority and due time), in the
    head's form: with the leading ``,\\n`` of a line of the queue object.

    Reads lazily: the object is split only up to ``stop``. Every line must
    have the max_attempts and creation time of the window's first (as
    :func:`encode_segment` writes them). Payload bytes are not parsed: they
    were checked when pushed or staged, and the etag vouches that the object
    is the one the broker wrote. ``ValueError`` naming the key and line for
    any disagreement, or for a window outside ``[0, ref.count]``.
    """
    check_segment(data, ref)
    lo = ref.taken if start is None else start
    hi = ref.count if stop is None else stop
    if not 0 <= lo <= hi <= ref.count:
        raise ValueError(f"segment {ref.key}: window [{lo}, {hi}) is outside [0, {ref.count}]")
    if lo == hi:
        return []
    # (the split copies the rest of the object once: segments are bounded,
    # MAX_SEGMENT_JOBS)
    parts = data.split(b"\n", hi + 1)[lo + 1:hi + 1]
    first = ref.first_seq + lo
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
    """What every job line of a segment holds between its seq and its payload
    (``"status":"pending",...,"payload":``), checked on ``line`` (the job of
    ``seq``): status, the ref's priority and due time, no attempts, a
    max_attempts in range and a creation time. None if ``line`` is not such
    a line. (:func:`encode_segment` writes one max_attempts and creation time
    per segment, so each further line is checked by two ``startswith``.)"""
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
    job = pending_from_line(seq, line)  # (priority 0, created when due: set below)
    job.priority = ref.priority
    at = line.index(_CREATED, 30) + len(_CREATED)
    job.created_ms = stamp_ms(line[at:at + _STAMP_CHARS])
    return job


def check_version(ref: SegmentRef, etag: str | None, store_url: str) -> None:
    """Raise :class:`~broker.errors.SegmentMissing` naming the object unless
    ``etag`` (what the store has under ``ref.key``; None: nothing) is ``ref.etag``."""
    where = f"{store_url}/{ref.key}"
    if etag is None:
        raise SegmentMissing(f"queue {ref.queue!r} references segment {where}, which is "
                             "missing (deleted behind the broker's back?)")
    if etag != ref.etag:
        raise SegmentMissing(
            f"queue {ref.queue!r} references segment {where} at etag {shown(ref.etag)}, but "
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


# -- the head's list of references ----------------------------------------------------


def ref_to_json(ref: SegmentRef) -> dict[str, Any]:
    """The ref as the head's ``"segments"`` list holds it (times as text, for jq)."""
    return {"key": ref.key, "etag": ref.etag, "first_seq": ref.first_seq, "count": ref.count,
            "priority": ref.priority, "run_at": timefmt.fmt(ref.run_at_ms), "taken": ref.taken}


def ref_from_json(raw: Any, where: str) -> SegmentRef:
    """A ref from its JSON (:func:`ref_to_json`), checked: exactly its fields,
    a key :func:`broker.paths.segment_key` makes whose seq is ``first_seq``, a
    short printable etag, counts in range and ``taken <= count``. ``ValueError``
    naming ``where`` (e.g. ``"queue q: segments[3]"``) otherwise."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: a segment reference must be an object")
    if raw.keys() != _REF_FIELDS:
        odd = sorted(raw.keys() ^ _REF_FIELDS)
        raise ValueError(f"{where}: segment reference fields {shown(odd)} missing or unknown")
    key, etag = raw["key"], raw["etag"]
    parsed = parse_segment_key(key)
    if parsed is None:
        raise ValueError(f"{where}: {shown(key)} is not a segment key")
    if not isinstance(etag, str) or not 0 < len(etag) <= MAX_ETAG_CHARS or \
            not etag.isprintable():
        raise ValueError(f"{where}: segment {key} has etag {shown(etag)}; it must be "
                         f"1-{MAX_ETAG_CHARS} printable characters")
    count = _int(raw["count"], f"{where}: segment {key} count", 1, MAX_SEGMENT_JOBS)
    first_seq = _int(raw["first_seq"], f"{where}: segment {key} first_seq",
                     1, SEQ_MASK - count + 1)
    if first_seq != parsed[1]:
        raise ValueError(f"{where}: segment {key} has first_seq {first_seq}, "
                         "but its key names another")
    return SegmentRef(
        key=key, etag=etag, first_seq=first_seq, count=count,
        priority=_int(raw["priority"], f"{where}: segment {key} priority",
                      -MAX_PRIORITY, MAX_PRIORITY),
        run_at_ms=_time(raw["run_at"], f"{where}: segment {key} run_at"),
        taken=_int(raw["taken"], f"{where}: segment {key} taken", 0, count))


# -- claim order ----------------------------------------------------------------------


def due_key(ref: SegmentRef, now_ms: int) -> int | None:
    """The ready-heap key (:func:`broker.model.indexes.ready_key`) of the ref's
    next job, or None if it is exhausted or not due at ``now_ms``."""
    if ref.taken >= ref.count or ref.run_at_ms > now_ms:
        return None
    return ready_key(ref.priority, ref.run_at_ms, ref.first_seq + ref.taken)


def next_from(inline_key: int | None, refs: Sequence[SegmentRef], now_ms: int) -> int | None:
    """Where the next job in claim order comes from: :data:`INLINE` (the inline
    ready heap, whose head's key is ``inline_key``, None if it is empty), the
    index of a ref in ``refs``, or None if nothing is claimable at ``now_ms``.

    The caller gives the inline head as claimable (due, not stale). Keys are
    ready-heap keys, so the order is the heap's: priority (higher first),
    run-at, seq. One pass over the refs.
    """
    best, best_key = (None, None) if inline_key is None else (INLINE, inline_key)
    for i, ref in enumerate(refs):
        key = due_key(ref, now_ms)
        if key is not None and (best_key is None or key < best_key):
            best, best_key = i, key
    return best


def run_from(inline_key: int | None, refs: Sequence[SegmentRef], i: int, now_ms: int) -> int:
    """How many jobs in a row ref ``i`` gives in claim order before the inline
    head (``inline_key``) or another ref's next job comes first: 0 if it is
    not the next source. A segment's keys are consecutive (one priority and
    due time, consecutive seqs), so this is one subtraction."""
    key = due_key(refs[i], now_ms)
    if key is None:
        return 0
    others = [k for j, ref in enumerate(refs) if j != i
              and (k := due_key(ref, now_ms)) is not None]
    if inline_key is not None:
        others.append(inline_key)
    limit = min(others, default=None)
    remaining = refs[i].count - refs[i].taken
    return remaining if limit is None else max(0, min(remaining, limit - key))


def take(refs: Sequence[SegmentRef], i: int, n: int = 1) -> SegmentRef:
    """Ref ``i`` with its cursor advanced by ``n`` jobs (which move into the
    head); ``ValueError`` for ``n < 1`` or more than remain."""
    ref = refs[i]
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= ref.count - ref.taken:
        raise ValueError(f"segment {ref.key}: cannot take {shown(n)} of its "
                         f"{ref.count - ref.taken} remaining jobs")
    return replace(ref, taken=ref.taken + n)


def merged_order(inline: Iterable[int], refs: Sequence[SegmentRef],
                 now_ms: int) -> list[int]:
    """Every claimable job's ready-heap key in claim order, inline (keys) and
    from ``refs``: what repeated :func:`next_from` and :func:`take` yield. For
    tests and tools; the claim itself takes a batch at a time."""
    heap = list(inline)
    heapq.heapify(heap)
    refs = list(refs)
    out: list[int] = []
    while True:
        source = next_from(heap[0] if heap else None, refs, now_ms)
        if source is None:
            return out
        if source == INLINE:
            out.append(heapq.heappop(heap))
        else:
            n = run_from(heap[0] if heap else None, refs, source, now_ms)
            key = due_key(refs[source], now_ms)
            assert key is not None and n >= 1  # (next_from chose it)
            out.extend(range(key, key + n))
            refs[source] = take(refs, source, n)


# -- purge, exhaustion, stats ---------------------------------------------------------


def purge_segments(refs: Sequence[SegmentRef]) -> tuple[list[SegmentRef], int]:
    """A purge of pending jobs, for the segments: every ref is dropped (a
    segment's untaken jobs are all pending; its taken ones are in the head).
    Returns the dropped refs, whose objects the broker deletes only after the
    commit without them has landed, and how many pending jobs went with them."""
    dropped = list(refs)
    return dropped, sum(ref.count - ref.taken for ref in dropped)


def drop_exhausted(refs: Sequence[SegmentRef]) -> tuple[list[SegmentRef], list[SegmentRef]]:
    """``(live, exhausted)``: the refs with jobs left, and the fully taken ones
    the next commit drops (their objects deleted once that commit has landed)."""
    live = [ref for ref in refs if ref.taken < ref.count]
    return live, [ref for ref in refs if ref.taken >= ref.count]


def holding(refs: Sequence[SegmentRef], seq: int) -> int | None:
    """The index in ``refs`` (in ascending first seq, as the head keeps them) of
    the segment whose untaken part holds ``seq``, or None."""
    at = bisect.bisect_right(refs, seq, key=lambda ref: ref.first_seq) - 1
    if at >= 0 and refs[at].next_seq <= seq < refs[at].first_seq + refs[at].count:
        return at
    return None


def segment_counts(refs: Iterable[SegmentRef]) -> int:
    """How many pending jobs the segments hold (for ``stats``)."""
    return sum(ref.count - ref.taken for ref in refs)


def oldest_due(refs: Iterable[SegmentRef]) -> int | None:
    """The earliest due time (ms) among the segments with jobs left, or None."""
    return min((ref.run_at_ms for ref in refs if ref.taken < ref.count), default=None)


def next_wakeup(refs: Iterable[SegmentRef], now_ms: int) -> int | None:
    """The earliest due time after ``now_ms`` among the segments with jobs left
    (when a claim may next find one of them due), or None."""
    return min((ref.run_at_ms for ref in refs
                if ref.taken < ref.count and ref.run_at_ms > now_ms), default=None)
