"""The compaction of a queue's dead spill refs: each spill adds one ref to
the head, which every commit writes, so once small dead refs pile up the
broker merges their objects into one (or a few) ordinary dead spill objects
and a commit puts their refs in place of the old ones. Pure: the state and
the objects' jobs in, the merged objects' bytes out; the I/O (reading,
writing, when to swap) is :class:`broker.service.spill_writer.SpillWriter`'s.

:func:`to_compact` says which refs to merge, :func:`merged` makes the merged
objects of their live jobs, :func:`compact` swaps the refs (checked: the old
refs must still be the head's as they were)."""

from __future__ import annotations

from collections.abc import Sequence

from broker.model.format.spill_format import MAX_SPILL_JOBS, EncodedSpill, SpilledJob, encode_spills
from broker.model.format.spill_refs import SpillRef, is_out
from broker.model.job import DEAD
from broker.model.state import QueueState

#: Past this many small dead refs in the head a commit merges some (:func:`to_compact`).
COMPACT_REFS = 32
#: Most live jobs one merge takes (a quarter of an object's bound: a lookup or
#: a redrive by id reads a whole object, and this keeps that read near 4 MB).
MERGED_JOBS = MAX_SPILL_JOBS // 4
#: A dead ref holding fewer live jobs than this is small: a merge candidate
#: (a merge's object holds more: it is not merged again).
SMALL_REF_JOBS = MERGED_JOBS // 2


def to_compact(state: QueueState, skip: frozenset[str] = frozenset()) -> list[SpillRef]:
    """The dead refs a commit merges into fewer objects (:func:`merged`,
    :func:`compact`), or none: once more than :data:`COMPACT_REFS` dead refs
    (not named in ``skip``: refs whose merge did not shrink) are small (fewer
    than :data:`SMALL_REF_JOBS` live jobs), the smallest of them, as many as
    hold at most :data:`MERGED_JOBS` live jobs in all (at least two). Each
    spill of a bad deploy adds one small ref; this keeps them at most about
    ``COMPACT_REFS`` besides the merged ones (each of over 8,192 jobs), so
    the head's list stays O(dead / 8,192 + COMPACT_REFS). O(refs)."""
    small = sorted((ref.live, i, ref) for i, ref in enumerate(state.spill_refs)
                   if isinstance(ref, SpillRef) and ref.kind == DEAD
                   and ref.live < SMALL_REF_JOBS and ref.key not in skip)
    if len(small) <= COMPACT_REFS:
        return []
    picked: list[SpillRef] = []
    total = 0
    for live, _, ref in small:
        if total + live > MERGED_JOBS and len(picked) >= 2:
            break
        picked.append(ref)
        total += live
    return picked


def merged(queue: str, refs: Sequence[SpillRef],
           jobs: Sequence[list[SpilledJob]]) -> list[EncodedSpill]:
    """The dead objects holding the live jobs of dead ``refs`` (``jobs`` each
    one's read object, every position), sorted as a dead object's lines are
    (errors, attempts, keys kept: every job as it was), split at the spill
    objects' bounds. ``ValueError`` if a ref is not dead, ``jobs`` do not
    match them, or no job is live."""
    if len(refs) != len(jobs) or any(ref.kind != DEAD or len(got) != ref.count
                                     for ref, got in zip(refs, jobs, strict=False)):
        raise ValueError("the objects read do not match the dead spill references merged")
    live = [job for ref, got in zip(refs, jobs, strict=True)
            for pos, job in enumerate(got) if not is_out(ref, pos)]
    return encode_spills(queue, DEAD, live)


def compact(state: QueueState, olds: Sequence[SpillRef], news: Sequence[SpillRef]) -> None:
    """The merge's change, once every new object was written: ``news`` (refs
    to :func:`merged` objects of ``olds``) take the place of ``olds`` in
    ``"spills"`` (at the first old one's), and ``olds`` are dropped (their
    objects deleted once this commit landed). ``ValueError``, having
    changed nothing, if an old ref is no longer the head's as it was, or the
    new ones do not hold exactly the old ones' live jobs."""
    at = {ref: i for i, ref in enumerate(state.spill_refs) if isinstance(ref, SpillRef)}
    if not olds or any(ref not in at for ref in olds) or \
            sum(ref.live for ref in olds) != sum(ref.count for ref in news) or \
            any(ref.kind != DEAD or ref.out for ref in news):
        raise ValueError("the merged spill references do not replace the head's as they are")
    first = min(at[ref] for ref in olds)
    gone = set(olds)
    kept = [ref for ref in state.spill_refs[:first] if ref not in gone]
    state.spill_refs[:] = [*kept, *news,
                           *(ref for ref in state.spill_refs[first:] if ref not in gone)]
    state.dropped_refs.extend(olds)
