"""Each group's heap of its jobs' keys, as a grouped claim reads and takes them
(:mod:`broker.model.segments.grouped` keeps the heaps in the queue's
:class:`~broker.model.groups.counts.GroupState`): a heap's live top (stale
entries dropped, early ones moved to the delayed heap), and the turns of a
claim in fair order served in one call (:func:`fair_turns`).

A bulk push into built groups in fair order goes straight into their heaps
(:func:`take_pushed`; dispatch told at the next claim, with the heads that
claim takes from the ready heap: :func:`tell_pushed`).

Pure: no I/O, time passed in.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import cast

from broker.limits import MAX_PRIORITY
from broker.model.groups.counts import GroupState
from broker.model.groups.dispatch import Dispatch, Head, JobHeaps
from broker.model.groups.names import NO_GROUP
from broker.model.indexes import (
    SEQ_BITS,
    SEQ_MASK,
    TIME_BITS,
    TIME_MASK,
    key_time,
    ready_key,
    timed_key,
)
from broker.model.job import PENDING, Job
from broker.model.segments.refs import holding
from broker.model.state import QueueState

_READY_PRIORITY_SHIFT = SEQ_BITS + TIME_BITS  # (a ready key's priority: see ready_key)

__all__ = ["drop_stale", "fair_turns", "live_top", "virtual_at"]


def virtual_at(state: QueueState, seq: int) -> int | None:
    """The index of the grouped ref holding ``seq`` at an untaken position (a
    run's next job, not yet in the head), or None."""
    at = holding(state.segment_refs, seq)
    return at if at is not None and state.segment_refs[at].groups is not None else None


def live_top(state: QueueState, heap: list[int] | None, now_ms: int,
             fifo: bool = False) -> int | None:
    """The first live, due entry of a group's heap (stale ones popped, early ones
    moved to the delayed heap), or None. ``fifo`` (a fifo group: keys are seqs):
    the first pending job's, due or not."""
    entries = state.jobs.entries
    if fifo:
        while heap:
            seq = heap[0]
            job = entries.get(seq)
            if isinstance(job, bytes) or (job is not None and job.status == PENDING) or (
                    job is None and virtual_at(state, seq) is not None):
                return seq
            heapq.heappop(heap)
        return None
    while heap:
        entry = heap[0]
        seq = entry & SEQ_MASK
        job = entries.get(seq)
        if job is None:  # (a grouped segment run's next job, or gone)
            at = virtual_at(state, seq)
            if at is not None:
                ref = state.segment_refs[at]
                if ref.run_at_ms <= now_ms and entry == ready_key(
                        ref.priority, ref.run_at_ms, seq):
                    return entry
            heapq.heappop(heap)
            continue
        if isinstance(job, bytes):
            if key_time(entry) <= now_ms:
                return entry
            heapq.heappop(heap)  # (its line's one entry: due later, as claim_ready does)
            heapq.heappush(state.delayed, timed_key(key_time(entry), seq))
            continue
        # (ready_key(), inlined: twice per job claimed, bench/groups_cpu_bench.py)
        if job is None or job.status != PENDING or (
                ((MAX_PRIORITY - job.priority) << _READY_PRIORITY_SHIFT)
                | (job.run_at_ms << SEQ_BITS) | seq) != entry:
            heapq.heappop(heap)
            continue
        if job.run_at_ms > now_ms:
            heapq.heappop(heap)
            heapq.heappush(state.delayed, timed_key(job.run_at_ms, seq))
            continue
        return entry
    return None


def drop_stale(state: QueueState, groups: GroupState, now_ms: int) -> list[int]:
    """Drop, from the heaps of the groups marked :attr:`~GroupState.stale` or
    :attr:`~GroupState.twice` since the last call, every entry :func:`live_top`
    would drop (jobs cancelled or purged, early ones moved to the delayed heap
    as it moves them) and every repeated one, and clear the marks: then each
    heap holds one entry a pending job (a run's next, for a grouped segment's).
    O(those heaps' entries), once a mark; a heap only repeated (fifo) is
    deduplicated in C. Returns the gids whose heaps were stale (or emptied),
    whose heads dispatch must be told again; a heap left empty is dropped."""
    heaps = groups.heaps
    stale, twice = groups.stale, groups.twice
    groups.stale, groups.twice = set(), set()
    fifo_order = groups.settings.fifo
    for gid in twice - stale:
        heap = heaps.get(gid)
        if heap is not None and len(set(heap)) != len(heap):
            heap[:] = sorted(set(heap))  # (ascending: a heap)
    out = []
    for gid in stale:
        heap = heaps.get(gid)
        if heap is None:
            continue
        fifo = fifo_order and gid != NO_GROUP
        heap[:] = sorted(entry for entry in set(heap)
                         if live_top(state, [entry], now_ms, fifo) is not None)
        if not heap:
            del heaps[gid]
        out.append(gid)
    return out


def fair_turns(state: QueueState, groups: GroupState, chosen: list[int], want: int,
               now_ms: int) -> None:
    """Up to ``want`` jobs of a claim in fair order without per-group rates or
    segments, their ready keys appended to ``chosen``: every turn in one call of
    :meth:`~broker.model.groups.dispatch.Dispatch.serve_turns`, each turn's jobs
    taken here as the loop of :func:`broker.model.segments.grouped.claim_grouped`
    takes them (the group's told head checked live first; up to ``q`` jobs of its
    priority), read from the groups' heaps in that call
    (:class:`~broker.model.groups.dispatch.JobHeaps`). The same turns as that loop,
    a few calls a job fewer (``bench/groups_cpu_bench.py``)."""
    heaps, entries, dispatch = groups.heaps, state.jobs.entries, groups.dispatch
    if NO_GROUP in heaps:  # (group 0's head, as the loop sets it before a pick)
        top = live_top(state, heaps[NO_GROUP], now_ms)
        dispatch.set_head(NO_GROUP, None if top is None else Head(
            MAX_PRIORITY - (top >> _READY_PRIORITY_SHIFT), top, 0), now_ms)
    dispatch.serve_turns(now_ms, want, lines=JobHeaps(
        heaps, entries, lambda heap: live_top(state, heap, now_ms), chosen))


def in_bulk(state: QueueState, groups: GroupState) -> bool:
    """Whether a claim's turns go by :func:`fair_turns` (fair order, no per-group
    rate, no segment), not by the loop of
    :func:`~broker.model.segments.grouped.claim_grouped`: the same turns."""
    return not groups.settings.fifo and groups.dispatch.buckets is None \
        and not state.segment_refs


def told(dispatch: Dispatch, gid: int) -> int | None:
    """The order key of the head dispatch holds for group ``gid`` (None: none)."""
    head = dispatch.head(gid)
    return None if head is None else head.order


def take_pushed(state: QueueState, pushed: Sequence[str | None], now_ms: int) -> None:
    """A bulk push's jobs (their groups ``pushed``, one per job, in seq order;
    the state's ready heap held nothing else) straight into their groups' heaps,
    not through the ready heap: :func:`~broker.model.segments.grouped._absorb`
    would put each there at the next claim, reading its group back off its
    line. That claim (or stats) tells dispatch those groups' heads, at its time,
    together with the heads of the jobs it takes from the ready heap, as if
    these had been there too (:func:`tell_pushed`). Only for groups in fair
    order without per-group rates or segments, every job with a group; else a
    no-op (the ready heap keeps them). ``bench/groups_cpu_bench.py``: a job's
    way from push to claim."""
    groups: GroupState | None = state.groups
    ready = state.ready
    if groups is None or not in_bulk(state, groups) or len(ready) != len(pushed):
        return
    names, heaps, push, untold = groups.names, groups.heaps, heapq.heappush, groups.untold
    # The gids in C (names.gid() only for a name not interned yet, in push order), then
    # one heap lookup a job (groups_model_bench --instructions: a push's jobs are
    # mostly of distinct groups, so a per-push cache of heaps by name found none)
    # (a KeyError, not a scan for None: None is never a key of ids, and the compares
    # of a scan cost more than they save)
    try:
        gids = list(map(names.ids.__getitem__, cast("Sequence[str]", pushed)))
    except KeyError:
        if None in pushed:  # (a job without a group: the ready heap keeps them)
            return
        gids = [names.gid(group) for group in pushed]
    find = heaps.get
    for entry, gid in zip(ready, gids, strict=True):
        heap = find(gid)
        if gid not in untold:  # (its top before: what _absorb compares the new top with)
            untold[gid] = heap[0] if heap else None
        if heap is None:
            heaps[gid] = [entry]
        else:
            push(heap, entry)
    groups.pushed.extend(ready)
    groups.untold_ms = max(groups.untold_ms, now_ms)
    ready.clear()


def tell_pushed(state: QueueState, groups: GroupState, now_ms: int) -> dict[int, int | None]:
    """The groups :func:`take_pushed` filled since the last claim, each with its
    heap's top before (None: it had no heap), as
    :func:`~broker.model.segments.grouped._absorb` collects the groups it puts
    ready jobs in (dispatch is told their heads once, with those: told twice, a
    group's pass would catch up with the virtual time at a priority it never
    competed at). Their heaps are first left as ``_absorb`` would have filled
    them: pushed jobs since settled or cancelled leave, and those no longer due
    (the clock stepped back) go to the delayed heap. A group whose heap that
    empties is left out (and its heap dropped)."""
    heaps, entries, delayed = groups.heaps, state.jobs.entries, state.delayed
    untold, pushed, untold_ms = groups.untold, groups.pushed, groups.untold_ms
    groups.untold, groups.pushed, groups.untold_ms = {}, [], 0
    bad: set[int] = set()
    # The common case, every one still its line and due (pushed at or before now_ms),
    # is found in C loops (bench/groups_cpu_bench.py); else each is looked at.
    if untold_ms > now_ms or not set(map(type, map(
            entries.get, map(SEQ_MASK.__and__, pushed)))) <= {bytes}:
        for entry in pushed:
            job = entries.get(entry & SEQ_MASK)
            if job.__class__ is not bytes or (entry >> SEQ_BITS) & TIME_MASK > now_ms:
                bad.add(entry)
    for entry in sorted(bad):  # (rare: as _absorb would have met them in the ready heap)
        seq = entry & SEQ_MASK
        job = entries.get(seq)
        if isinstance(job, bytes):
            heapq.heappush(delayed, timed_key(key_time(entry), seq))
        elif isinstance(job, Job) and job.status == PENDING \
                and ready_key(job.priority, job.run_at_ms, seq) == entry:
            if job.run_at_ms <= now_ms:
                bad.discard(entry)  # (a live job read off its line since: it stays)
            else:
                heapq.heappush(delayed, timed_key(job.run_at_ms, seq))
    touched: dict[int, int | None] = {}
    for gid, top in untold.items():
        heap = heaps.get(gid)
        if heap and bad:
            keep = [entry for entry in heap if entry not in bad]
            if len(keep) != len(heap):
                heapq.heapify(keep)
                heap[:] = keep
        if not heap:  # (every job pushed into it gone, and it had none before)
            heaps.pop(gid, None)
            continue
        touched[gid] = top
    return touched
