"""The head's references to segment objects: claim order, cursors, purge, and
which segment holds a seq. Pure: values in, values out; the time is passed in.

What a segment is: :mod:`broker.model.segments`. Its bytes (a header line,
then one payload a line) are :mod:`broker.model.format.segment_format`'s. The
broker writes them (:mod:`broker.service.by_reference`), takes jobs from them
in claim order (:mod:`broker.model.segments.claims`), and reads them through
:func:`~broker.model.format.segment_format.read_checked`, as the Spark reader does.

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

Grouped refs (segment format 3, not yet written by the broker): taken a run's
prefix at a time, they keep their taken positions as runs (``taken_at``);
:func:`take_positions`, :func:`untake_positions`, :func:`is_taken`,
:func:`untaken_spans` and :func:`size_estimate` are the pure operations on
them the claim, release, pages and stats will use.

Errors: taking more jobs than a reference has left is a ``ValueError``
naming the segment's key. (A reference's JSON, and the checks of a read one:
:mod:`broker.model.format.segment_format`.)
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from broker.errors import shown
from broker.model.indexes import ready_key
from broker.model.state import (  # (defined with the state)
    GROUPED_REF_BYTES,
    SEGMENT_REF_BYTES,
    TAKEN_RUN_BYTES,
    SegmentRef,
)

#: The claim-order source :func:`next_from` names for the inline ready heap.
INLINE = -1


# -- claim order ----------------------------------------------------------------------


def due_key(ref: SegmentRef, now_ms: int) -> int | None:
    """The ready-heap key (:func:`broker.model.indexes.ready_key`) of the ref's
    next job, or None if it is exhausted or not due at ``now_ms``, or grouped
    (its jobs are taken by group, not from a cursor)."""
    if ref.taken >= ref.count or ref.run_at_ms > now_ms or ref.groups is not None:
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


# -- purge, stats ---------------------------------------------------------


def purge_segments(refs: Sequence[SegmentRef]) -> tuple[list[SegmentRef], int]:
    """A purge of pending jobs, for the segments: every ref is dropped (a
    segment's untaken jobs are all pending; its taken ones are in the head).
    Returns the dropped refs, whose objects the broker deletes only after the
    commit without them has landed, and how many pending jobs went with them."""
    dropped = list(refs)
    return dropped, sum(ref.count - ref.taken for ref in dropped)


def holding(refs: Sequence[SegmentRef], seq: int) -> int | None:
    """The index in ``refs`` (in ascending first seq, as the head keeps them) of
    the segment whose untaken part holds ``seq`` (of a grouped one: a position
    not in its ``taken_at``), or None."""
    at = bisect.bisect_right(refs, seq, key=lambda ref: ref.first_seq) - 1
    if at < 0:
        return None
    ref = refs[at]
    if ref.groups is not None:
        pos = seq - ref.first_seq
        return at if pos < ref.count and not is_taken(ref, pos) else None
    if ref.next_seq <= seq < ref.first_seq + ref.count:
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


# -- grouped refs: taken positions as runs -----------------------------------------------
#
# A grouped segment (format 3: its jobs group-major, a directory of runs in its header)
# is taken a run's prefix at a time, not a prefix of the whole segment, so its ref
# keeps the taken positions as runs: ``taken_at`` = (from, n, from, n, ...), ascending,
# disjoint and coalesced (format: segment_format.check_taken_at). Not yet used:
# nothing makes a grouped ref yet; these are the pure operations the claim, release,
# pages and stats will use. Positions count from 0, the segment's first job.



def size_estimate(refs: Iterable[SegmentRef]) -> int:
    """Rough bytes the refs' lines cost in the head: :data:`~broker.model.state.SEGMENT_REF_BYTES`
    each, plus, for a grouped ref, :data:`GROUPED_REF_BYTES` and
    :data:`TAKEN_RUN_BYTES` a ``taken_at`` run (what ``max_state_bytes`` must see:
    10,000 runs are ~140 KB)."""
    total = 0
    for ref in refs:
        total += SEGMENT_REF_BYTES
        if ref.groups is not None:
            total += GROUPED_REF_BYTES + TAKEN_RUN_BYTES * (len(ref.taken_at) // 2)
    return total


def taken_count(taken_at: Sequence[int]) -> int:
    """How many positions the runs ``taken_at`` hold."""
    return sum(taken_at[1::2])


def _run_before(taken_at: Sequence[int], pos: int) -> int:
    """The index (of pairs) of the last run of ``taken_at`` starting at or before
    ``pos``, or -1. Binary search over the runs' starts."""
    lo, hi = 0, len(taken_at) // 2
    while lo < hi:
        mid = (lo + hi) // 2
        if taken_at[2 * mid] <= pos:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def _check_pos(ref: SegmentRef, pos: int) -> None:
    if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos < ref.count:
        raise ValueError(f"segment {ref.key}: position {shown(pos)} is outside "
                         f"[0, {ref.count})")


def is_taken(ref: SegmentRef, pos: int) -> bool:
    """Whether the job at position ``pos`` of ``ref``'s segment is taken (in the
    head or a claim record): in ``taken_at`` for a grouped ref, before the
    cursor for another. ``ValueError`` for a position outside the segment."""
    _check_pos(ref, pos)
    if ref.groups is None:
        return pos < ref.taken
    r = _run_before(ref.taken_at, pos)
    return r >= 0 and pos < ref.taken_at[2 * r] + ref.taken_at[2 * r + 1]


def taken_between(ref: SegmentRef, lo: int, hi: int) -> int:
    """How many positions in ``[lo, hi)`` of ``ref``'s segment are taken (for a
    run of the directory: how much of it is taken; a run's next job is its
    start plus that, while only its prefix is taken)."""
    if not 0 <= lo <= hi <= ref.count:
        raise ValueError(f"segment {ref.key}: span [{lo}, {hi}) is outside [0, {ref.count}]")
    if ref.groups is None:
        return max(0, min(hi, ref.taken) - lo)
    taken_at, total = ref.taken_at, 0
    r = max(0, _run_before(taken_at, lo))
    while 2 * r < len(taken_at) and taken_at[2 * r] < hi:
        start = taken_at[2 * r]
        total += max(0, min(hi, start + taken_at[2 * r + 1]) - max(lo, start))
        r += 1
    return total


def untaken_spans(ref: SegmentRef, lo: int = 0, hi: int | None = None) -> list[tuple[int, int]]:
    """The untaken (pending) positions of ``ref``'s segment in ``[lo, hi)``
    (default: all of it) as ``(from, to)`` spans, ascending: what pages, lookups
    and the Spark reader read of it."""
    hi = ref.count if hi is None else hi
    if not 0 <= lo <= hi <= ref.count:
        raise ValueError(f"segment {ref.key}: span [{lo}, {hi}) is outside [0, {ref.count}]")
    if ref.groups is None:
        start = max(lo, ref.taken)
        return [(start, hi)] if start < hi else []
    out, at, taken_at = [], lo, ref.taken_at
    r = max(0, _run_before(taken_at, lo))
    while 2 * r < len(taken_at) and taken_at[2 * r] < hi:
        start, end = taken_at[2 * r], taken_at[2 * r] + taken_at[2 * r + 1]
        if start > at:
            out.append((at, start))
        at = max(at, end)
        r += 1
    if at < hi:
        out.append((at, hi))
    return out


def pending_lines(ref: SegmentRef, lines: Sequence[bytes]) -> Iterator[tuple[int, bytes]]:
    """``(seq, line)`` of the untaken (pending) jobs of ``ref``'s segment, given
    ``lines``: what :func:`~broker.model.format.segment_format.segment_lines`
    reads of it by default (the untaken ones from the cursor on; of a grouped
    segment, every line, of which those at ``taken_at`` are skipped here). For
    the readers of whole segments (the Spark reader, the chaos checker)."""
    if ref.groups is None:
        return zip(itertools.count(ref.next_seq), lines)
    first = ref.first_seq
    return ((first + pos, lines[pos]) for lo, hi in untaken_spans(ref)
            for pos in range(lo, hi))


def next_untaken(ref: SegmentRef, pos: int) -> int:
    """The first untaken position at or after ``pos`` (``ref.count`` if none):
    a run's cursor past a hole (a cancelled job taken out of its middle).
    O(log runs): ``taken_at`` is coalesced, so the position after a taken run
    is untaken."""
    if pos >= ref.count:
        return ref.count
    if ref.groups is None:
        return max(pos, ref.taken)
    taken_at = ref.taken_at
    r = _run_before(taken_at, pos)
    if r >= 0 and pos < taken_at[2 * r] + taken_at[2 * r + 1]:
        pos = taken_at[2 * r] + taken_at[2 * r + 1]
    return min(pos, ref.count)


def take_position(ref: SegmentRef, pos: int) -> SegmentRef:
    """:func:`take_positions` of the one position ``pos``: O(log runs) to find
    its place in ``taken_at`` and one copy of it (what every job a claim takes
    from a grouped segment costs). ``ValueError`` as :func:`take_positions`."""
    _grouped(ref, (pos,))
    taken_at = ref.taken_at
    r = _run_before(taken_at, pos)
    i = 2 * r
    if r >= 0 and pos < taken_at[i] + taken_at[i + 1]:
        raise ValueError(f"segment {ref.key}: position {pos} is already taken")
    left = r >= 0 and taken_at[i] + taken_at[i + 1] == pos
    right = i + 2 < len(taken_at) and taken_at[i + 2] == pos + 1
    if left and right:
        out = (*taken_at[:i + 1], taken_at[i + 1] + 1 + taken_at[i + 3], *taken_at[i + 4:])
    elif left:
        out = (*taken_at[:i + 1], taken_at[i + 1] + 1, *taken_at[i + 2:])
    elif right:
        out = (*taken_at[:i + 2], pos, taken_at[i + 3] + 1, *taken_at[i + 4:])
    else:
        out = (*taken_at[:i + 2], pos, 1, *taken_at[i + 2:])
    return replace(ref, taken=ref.taken + 1, taken_at=out)


def coalesce(spans: Iterable[tuple[int, int]]) -> tuple[int, ...]:
    """``taken_at`` of ``(from, n)`` spans given in ascending order, disjoint but
    possibly adjacent (adjacent ones merge; spans of ``n == 0`` are dropped).
    ``ValueError`` for a negative ``n`` or a span overlapping or before the one
    before it."""
    out: list[int] = []
    end = -1
    for start, n in spans:
        if n < 0 or start < end or start < 0:
            raise ValueError(f"span ({start}, {n}) overlaps or comes before the one before it")
        if n == 0:
            continue
        if start == end:
            out[-1] += n
        else:
            out += (start, n)
        end = start + n
    return tuple(out)


def _spans_of(positions: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted distinct ``positions`` as ``(from, n)`` spans of consecutive ones;
    ``ValueError`` for a position given twice."""
    spans: list[tuple[int, int]] = []
    last = -2
    for pos in sorted(positions):
        if pos == last:
            raise ValueError(f"position {pos} is given twice")
        if pos == last + 1:
            spans[-1] = (spans[-1][0], spans[-1][1] + 1)
        else:
            spans.append((pos, 1))
        last = pos
    return spans


def _pairs(taken_at: Sequence[int]) -> list[tuple[int, int]]:
    return list(zip(taken_at[::2], taken_at[1::2], strict=True))


def _grouped(ref: SegmentRef, positions: Iterable[int]) -> list[tuple[int, int]]:
    if ref.groups is None:
        raise ValueError(f"segment {ref.key} is not grouped: its taken jobs are a "
                         "prefix (take)")
    positions = list(positions)
    for pos in positions:
        _check_pos(ref, pos)
    try:
        return _spans_of(positions)
    except ValueError as exc:
        raise ValueError(f"segment {ref.key}: {exc}") from None


def take_positions(ref: SegmentRef, positions: Iterable[int]) -> SegmentRef:
    """Grouped ref ``ref`` with ``positions`` (distinct, untaken, in any order)
    taken: added to ``taken_at`` (coalesced) and counted in ``taken``. Costs
    O(runs + k log k) for k positions. ``ValueError`` naming the key for an
    ungrouped ref, a position outside the segment, given twice or already taken."""
    new = _grouped(ref, positions)
    if not new:
        return ref
    merged = heapq.merge(_pairs(ref.taken_at), new)
    try:
        taken_at = coalesce(merged)
    except ValueError:
        pos = next(p for start, n in new for p in range(start, start + n) if is_taken(ref, p))
        raise ValueError(f"segment {ref.key}: position {pos} is already taken") from None
    return replace(ref, taken=ref.taken + sum(n for _, n in new), taken_at=taken_at)


def untake_positions(ref: SegmentRef, positions: Iterable[int]) -> SegmentRef:
    """Grouped ref ``ref`` with ``positions`` (distinct, taken) pending again:
    out of ``taken_at`` and ``taken`` (a release rewinding the end of a run's
    taken prefix). ``ValueError`` naming the key for an ungrouped ref, a
    position outside the segment, given twice or not taken."""
    gone = _grouped(ref, positions)
    for start, n in gone:
        if taken_between(ref, start, start + n) != n:
            bad = next(p for p in range(start, start + n) if not is_taken(ref, p))
            raise ValueError(f"segment {ref.key}: position {bad} is not taken")
    out: list[tuple[int, int]] = []
    cut = iter(gone)
    nxt = next(cut, None)
    for start, n in _pairs(ref.taken_at):
        end = start + n
        while nxt is not None and nxt[0] < end:
            if nxt[0] > start:
                out.append((start, nxt[0] - start))
            start = nxt[0] + nxt[1]
            nxt = next(cut, None)
        if start < end:
            out.append((start, end - start))
    removed = sum(n for _, n in gone)
    return replace(ref, taken=ref.taken - removed, taken_at=coalesce(out))
