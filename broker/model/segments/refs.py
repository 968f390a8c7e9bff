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

Errors: taking more jobs than a reference has left is a ``ValueError``
naming the segment's key. (A reference's JSON, and the checks of a read one:
:mod:`broker.model.format.segment_format`.)
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import replace

from broker.errors import shown
from broker.model.indexes import ready_key
from broker.model.state import SegmentRef  # (defined with the state that holds it)

#: The claim-order source :func:`next_from` names for the inline ready heap.
INLINE = -1


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
