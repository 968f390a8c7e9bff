"""Claims of a queue that uses groups: limits and fair dispatch between groups.

:func:`broker.model.segments.claims.claim_merged` comes here (one branch) while
the queue uses groups (:func:`uses_groups`: a group setting is set, or a job
of the head has a group); a queue that uses none takes today's code, unchanged.

The order (docs/operations.md, "Job groups"): priority first; among the
groups whose next job has the top priority, turns by stride scheduling
(:mod:`broker.model.groups.dispatch`: weights, the quantum); within a group,
the queue's usual order (priority desc, run-at, seq). A group holding as many
claimed jobs as its limit is parked: the claim takes the next eligible job of
another group instead, and the group's jobs stay pending ("held back") until a
settlement frees a place. Jobs without a group are one group of their own
(gid 0), never limited; the jobs of ungrouped segments belong to it and are
moved into the head as they are claimed (``move_in``, as ungrouped claims do).

Grouped segments (format 3: each group's jobs one run of positions) are
sources of their groups: once a due one's directory is loaded, each run
with an untaken position puts the ready key of its next untaken position in
its group's heap (one entry a run, not a job). A claim taking that entry
moves the one job into the head by position (``move_in_position``: its
position joins the ref's ``taken_at``) and puts the run's following untaken
position in the heap. A run's next job whose line is not loaded ends the
claim (never out of order); while a due grouped segment's directory is not
loaded, claims take nothing (the broker loads it before the batch).

The per-group structures (:class:`~broker.model.groups.counts.GroupState`)
are derived: built by the first claim after a load or a takeover, the held
counts from the claim records (so a limit holds across takeovers), the ready
jobs taken over from the queue's ready heap; kept by the claims here and by
the settle function (:func:`broker.model.lifecycle.settle`). A settings change
(or the queue no longer using groups) gives the ready jobs back
(:func:`dissolve`) and the next claim builds them again. A claim first
releases the names nothing refers to once the table is past its cap
(:func:`broker.model.groups.sweep.release_unused`). Pure: no I/O, time passed in.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial
from operator import attrgetter
from typing import Any

from broker.errors import CorruptState, InvalidRequest
from broker.limits import MAX_PRIORITY
from broker.model.groups.counts import (
    GroupState,
    held_by_group,
    priority_of,
    ready_key_of,
    source_key,
)
from broker.model.groups.directories import directory_of, run_at
from broker.model.groups.dispatch import Head
from broker.model.groups.names import NO_GROUP
from broker.model.groups.settings import parse_group_settings
from broker.model.groups.sweep import release_unused
from broker.model.indexes import (
    SEQ_BITS,
    SEQ_MASK,
    TIME_BITS,
    TIME_MASK,
    key_time,
    promote_due,
    ready_key,
    timed_key,
)
from broker.model.job import DEAD, PENDING, Job
from broker.model.job_lines import group_of_field, line_group_field, pending_from_line
from broker.model.lifecycle import IllegalMove, claim_ready
from broker.model.ops import LeasedJobs
from broker.model.segments.group_heaps import (
    drop_stale,
    fair_turns,
    in_bulk,
    live_top,
    take_pushed,
    tell_pushed,
    told,
    virtual_at,
)
from broker.model.segments.refs import due_key, next_untaken, run_from, taken_between
from broker.model.state import QueueState

_READY_PRIORITY_SHIFT = SEQ_BITS + TIME_BITS  # (a ready key's priority: see ready_key)

__all__ = ["claim_grouped", "dissolve", "group_state", "group_stats", "take_pushed", "taken_out",
           "uses_groups"]


def uses_groups(state: QueueState) -> bool:
    """Whether claims of ``state`` go by groups: a group setting is set, or a
    job of the head has (or lately had) a group, or a segment is grouped."""
    return bool(state.settings.groups) or bool(state.grouped) or grouped_refs(state)


def grouped_refs(state: QueueState) -> bool:
    """Whether the head references a grouped segment (format 3)."""
    return any(ref.groups is not None for ref in state.segment_refs)


def _register(state: QueueState, groups: GroupState, now_ms: int) -> bool:
    """Put the runs of the due grouped segments not yet known to ``groups``
    into their groups' heaps (see the module docstring); False if one's
    directory is not loaded (its groups' next jobs are unknown). In fifo order
    the runs of a segment not yet due are put in too (a group's head is its
    oldest job, due or not), but for group 0's (fair: due jobs only), which
    are put in once it is due."""
    runs_of = state.windows.runs if state.windows is not None else {}
    heaps, ok = groups.heaps, True
    fifo = groups.settings.fifo
    touched: set[int] = set()
    for ref in state.segment_refs:
        due = ref.run_at_ms <= now_ms
        if ref.groups is None or (not due and not fifo) or ref.exhausted:
            continue
        name = (ref.key, ref.etag)
        only: int | None = None  # (the one gid whose runs go in now, if not all)
        d = groups.dirs.get(name)
        if d is not None:
            if not due or name not in groups.early:
                continue
            groups.early.discard(name)  # (due now: its group 0 runs go in)
            only = NO_GROUP
        else:
            runs = runs_of.get(name)
            if runs is None:
                ok = False
                continue
            d = groups.dirs[name] = directory_of(runs, groups.names)
            if not due:
                groups.early.add(name)
        starts, gids = d.starts, d.gids
        for r in range(d.runs):
            gid = gids[r]
            if (only is not None and gid != only) or (not due and gid == NO_GROUP):
                continue
            nxt = next_untaken(ref, starts[r])
            if nxt < starts[r + 1]:
                heapq.heappush(heaps.setdefault(gid, []), source_key(
                    fifo, gid, ref.priority, ref.run_at_ms, ref.first_seq + nxt))
                touched.add(gid)
    for gid in touched:
        if gid != NO_GROUP:  # (group 0's head is set by the claim, segments and all)
            _refresh(state, groups, gid, now_ms)
    return ok


def _take(state: QueueState, groups: GroupState, heap: list[int], chosen: list[int],
          move_in_position: Callable[[QueueState, int, int], Job | None],
          fifo: bool = False) -> bool:
    """Take the live top of ``heap`` into ``chosen`` (as a ready key; ``fifo``:
    the heap's keys are seqs): an inline job, or a run's next job, moved into
    the head first (its run's following untaken position takes its place in
    the heap). False (nothing changed) if that job's line is not loaded."""
    entry = heap[0]
    seq = entry & SEQ_MASK
    if seq in state.jobs.entries:
        heapq.heappop(heap)
        while heap and heap[0] == entry:  # (a job indexed twice, e.g. after a settings change)
            heapq.heappop(heap)
        chosen.append(_ready_entry(state, seq) if fifo else entry)
        return True
    at = virtual_at(state, seq)
    assert at is not None  # (live_top found it live)
    ref = state.segment_refs[at]
    d = groups.dirs.get((ref.key, ref.etag))
    pos = seq - ref.first_seq
    if d is None or move_in_position(state, at, pos) is None:
        return False
    heapq.heappop(heap)
    chosen.append(_ready_entry(state, seq) if fifo else entry)
    if not ref.exhausted and ref.taken + 1 < ref.count:
        after = state.segment_refs[at]  # (the ref with pos taken: not dropped)
        end = d.starts[run_at(d, pos) + 1]
        nxt = next_untaken(after, pos + 1)
        if nxt < end:
            heapq.heappush(heap, entry + nxt - pos)  # (a run's keys: consecutive seqs)
    return True


def taken_out(state: QueueState, key: tuple[str, str], pos: int, now_ms: int) -> None:
    """Position ``pos`` of grouped segment ``key`` (its key and etag) was moved
    into the head outside a claim (a cancel). If the queue's groups know the
    segment, its run's next untaken position takes the run's place in its
    group's heap when ``pos`` held it, and the group's head is set again: the
    groups, their turns and token buckets are kept (rebuilt only if the clock
    stepped back, as for a claim)."""
    _stepped_back(state, now_ms)  # (then the claim registers the run as it stands)
    groups: GroupState | None = state.groups
    d = None if groups is None else groups.dirs.get(key)
    if groups is None or d is None:
        return  # (not registered yet: the claim registers the run as it stands)
    r = run_at(d, pos)
    gid = d.gids[r]
    ref = next((ref for ref in state.segment_refs if (ref.key, ref.etag) == key), None)
    if ref is not None and not (gid == NO_GROUP and key in groups.early):
        nxt = next_untaken(ref, d.starts[r])
        if pos < nxt < d.starts[r + 1]:  # (pos was the run's entry: its next goes in)
            heapq.heappush(groups.heaps.setdefault(gid, []), source_key(
                groups.settings.fifo, gid, ref.priority, ref.run_at_ms, ref.first_seq + nxt))
    if gid != NO_GROUP:  # (group 0's head is set by the claim, segments and all)
        _refresh(state, groups, gid, now_ms)


def group_state(state: QueueState, now_ms: int) -> GroupState:
    """The queue's :class:`GroupState`, built if it has none (the settings
    checked, the held counts rebuilt from the claim records). ``CorruptState``
    (nothing changed) for group settings in the head that do not check out."""
    groups: GroupState | None = state.groups
    if groups is not None:
        return groups
    try:
        settings = parse_group_settings(state.settings.groups, "the queue's settings")
    except InvalidRequest as exc:
        raise CorruptState(str(exc)) from None
    try:
        held = held_by_group(state.claim_records.values(), state.jobs)
    except KeyError as exc:
        raise CorruptState(str(exc.args[0])) from None
    kept, state.group_buckets = state.group_buckets, None
    groups = state.groups = GroupState(settings, held, now_ms, kept)
    if settings.fifo:
        _build_fifo(state, groups, now_ms)
    return groups


def _build_fifo(state: QueueState, groups: GroupState, now_ms: int) -> None:
    """Fill a fifo queue's group heaps with every pending grouped job of the
    head, due or not, and count each group's dead jobs (O(grouped jobs in the
    head), once a build); from then on :meth:`GroupState.moved` keeps them."""
    groups.refresh = partial(_refresh, state, groups)
    entries, gid_of, heaps, dead = state.jobs.entries, groups.names.gid, groups.heaps, groups.dead
    for seq in state.grouped:  # (every grouped job's seq in the head; some stale)
        job = entries.get(seq)
        if isinstance(job, bytes):
            job = pending_from_line(seq, job)
        if job is None or job.group is None:
            continue
        if job.status == PENDING:
            heaps.setdefault(gid_of(job.group), []).append(seq)
        elif job.status == DEAD:
            gid = gid_of(job.group)
            dead[gid] = dead.get(gid, 0) + 1
    for gid in set(heaps) | set(dead):
        heap = heaps.get(gid)
        if heap is not None:
            heapq.heapify(heap)
        _refresh(state, groups, gid, now_ms)
    groups.twice.update(heaps)  # (the ready heap's entries of these jobs come in again)


def _ready_entry(state: QueueState, seq: int) -> int:
    """The ready key of pending job ``seq`` of the head (a fifo group's pick)."""
    job = state.jobs.entries[seq]
    if isinstance(job, bytes):
        job = pending_from_line(seq, job)
    return ready_key(job.priority, job.run_at_ms, seq)


def _head_at(state: QueueState, entry: int | None, fifo: bool) -> Head | None:
    """The head dispatch is told for a group whose heap's live top is ``entry``:
    fair, its priority and ready key (due); fifo (``entry`` a seq), the job's
    priority, ready key and run-at (a head not due parks its group)."""
    if entry is None:
        return None
    if not fifo:
        return Head(priority_of(entry), entry, 0)
    job = state.jobs.entries.get(entry)
    if job is None:  # (a grouped segment run's next job)
        at = virtual_at(state, entry)
        assert at is not None  # (live_top found it live)
        ref = state.segment_refs[at]
        priority, run_at = ref.priority, ref.run_at_ms
    else:
        if isinstance(job, bytes):
            job = pending_from_line(entry, job)
        priority, run_at = job.priority, job.run_at_ms
    return Head(priority, ready_key_of(priority, run_at, entry), run_at)


def _refresh(state: QueueState, groups: GroupState, gid: int, now_ms: int) -> None:
    """Tell dispatch group ``gid``'s head (its heap's live top, stale entries
    dropped) and, in fifo order, its dead count."""
    fifo = groups.settings.fifo and gid != NO_GROUP
    heap = groups.heaps.get(gid)
    head = _head_at(state, live_top(state, heap, now_ms, fifo), fifo)
    if not heap:
        groups.heaps.pop(gid, None)
    groups.dispatch.set_head(gid, head, now_ms,
                             dead=groups.dead.get(gid, 0) if groups.settings.fifo else None)


def _stash_buckets(groups: GroupState) -> tuple[Any, Any] | None:
    """The groups' token buckets with the names of their gids, for the next
    build to keep (:func:`group_state`); None without a per-group rate."""
    buckets = groups.dispatch.buckets
    # (kept also when empty: they hold the latest time they saw)
    return None if buckets is None else (groups.names, buckets)


def carry_buckets(dropped: QueueState, fresh: QueueState) -> None:
    """The commit loop dropped its state and re-read the head (a write whose
    reply was lost): ``fresh`` keeps the per-group token buckets ``dropped``
    had, this broker's like the queue-wide bucket. Without them each re-read
    handed every group a fresh burst (more than ``burst + rate * T`` claims in
    a window T). Tokens spent by a batch that did not land stay spent: the
    limit errs towards fewer claims, never more."""
    groups: GroupState | None = dropped.groups
    fresh.group_buckets = (dropped.group_buckets if groups is None
                           else _stash_buckets(groups))


def _stepped_back(state: QueueState, now_ms: int) -> None:
    """Drop the groups' structures (:func:`dissolve`) if ``now_ms`` is before the
    latest time a claim or stats read advanced them at (``seen_ms``): the owner's
    clock stepped back, and the heaps hold runs and heads found due at that later
    time (a run's next job not due now would be dropped from its group's heap by
    :func:`live_top`, its run stranded until a rebuild). The next use rebuilds
    them from the head at its own time; the token buckets are kept."""
    groups: GroupState | None = state.groups
    if groups is not None and now_ms < groups.seen_ms:
        dissolve(state)


def dissolve(state: QueueState) -> None:
    """Give the groups' ready jobs back to the queue's ready heap and drop the
    per-group structures (a settings change; the queue no longer uses groups).
    Their token buckets are kept for the next build (:func:`group_state`)."""
    groups: GroupState | None = state.groups
    if groups is None:
        return
    ready, entries = state.ready, state.jobs.entries
    fifo = groups.settings.fifo
    # (fifo: a job's entry may be in the delayed heap, or the ready heap not yet taken
    # in, still: given back twice, the next groups' stats counted it twice)
    delayed = set(state.delayed) if fifo else set()
    for gid, heap in groups.heaps.items():
        if not fifo or gid == NO_GROUP:
            ready.extend(heap)
            continue
        for seq in set(heap):  # (seqs: their pending jobs' ready keys; runs are registered again)
            job = entries.get(seq)
            if isinstance(job, bytes) or (job is not None and job.status == PENDING):
                entry = _ready_entry(state, seq)
                if timed_key(key_time(entry), seq) not in delayed:
                    ready.append(entry)
    if fifo:
        ready[:] = set(ready)
    heapq.heapify(ready)
    state.group_buckets = _stash_buckets(groups)
    state.groups = None


def _absorb(state: QueueState, groups: GroupState, now_ms: int) -> None:
    """Move the ready heap's live entries into their groups' heaps (each entry
    once: amortized O(log) a job) and tell dispatch the changed heads."""
    ready, entries = state.ready, state.jobs.entries
    if not ready and not groups.untold:
        return
    gid_of, heaps = groups.names.gid, groups.heaps
    fifo = groups.settings.fifo  # (then a grouped job goes to its group's heap by seq, due or not)
    # gid -> its heap's top before (None: a new heap). Dispatch holds a group's
    # heap top as its head (served() and head_of() set it so, and only this module
    # changes the heaps), so a group whose top stays is told nothing: one dispatch
    # update per group whose head changed, not per group touched
    # (bench/groups_cpu_bench.py). Group 0's head may be a segment's: always told.
    # (the groups a bulk push filled since, told with these: group_heaps.take_pushed)
    touched = tell_pushed(state, groups, now_ms) if groups.untold else {}
    gids: dict[str | None, int] = {}  # (names.gid() once per group, not per job)
    names = groups.names
    spelt = names.spelt  # (and as lines spell them: once per group met lately)
    push = heapq.heappush
    # Every entry leaves the ready heap: sorted (in C) and read in order rather than
    # popped one by one, so each group's heap grows by ascending pushes that sift nothing.
    ready.sort()
    for entry in ready:
        seq = entry & SEQ_MASK
        job = entries.get(seq)
        if isinstance(job, bytes):  # (a bulk push's line: its one entry is live)
            field = line_group_field(job)
            if (entry >> SEQ_BITS) & TIME_MASK > now_ms and not (fifo and field is not None):
                push(state.delayed, timed_key(key_time(entry), seq))  # (clock back)
                continue
            gid = spelt.get(field)
            if gid is None:
                assert field is not None  # (spelt holds None)
                gid = names.gid_spelt(field, group_of_field(field))
        elif job is None or job.status != PENDING or (
                ((MAX_PRIORITY - job.priority) << _READY_PRIORITY_SHIFT)
                | (job.run_at_ms << SEQ_BITS) | seq) != entry:  # (ready_key(), inlined)
            continue
        elif job.run_at_ms > now_ms and not (fifo and job.group is not None):
            push(state.delayed, timed_key(job.run_at_ms, seq))
            continue
        else:
            group = job.group
            gid = gids.get(group)
            if gid is None:
                gid = gids[group] = gid_of(group)
        if fifo and gid != NO_GROUP:
            entry = seq  # (source_key in fifo order)
            if job.__class__ is not bytes:  # (its move to pending put it in its heap already)
                groups.twice.add(gid)
        heap = heaps.get(gid)
        if heap is None:
            heaps[gid] = [entry]
            touched[gid] = None
        else:
            if gid not in touched:
                touched[gid] = heap[0] if gid and heap else None
            push(heap, entry)
    ready.clear()
    if fifo:
        for gid, top in touched.items():
            if top is None or heaps[gid][0] != top:
                if gid != NO_GROUP:
                    _refresh(state, groups, gid, now_ms)
                else:
                    groups.head_of(gid, now_ms)
        return
    heads = []  # (groups.head_of() of each, told at once: their heaps are not empty)
    new = tuple.__new__  # (Head(...) without its Python-level __new__: once a group)
    for gid, top in touched.items():
        key = heaps[gid][0]
        if top is None or key != top:
            heads.append((gid, new(Head, (MAX_PRIORITY - (key >> _READY_PRIORITY_SHIFT), key, 0))))
    groups.dispatch.set_heads(heads, now_ms)


def _segment_next(state: QueueState, now_ms: int) -> tuple[int, int] | None:
    """The ungrouped segments' next job in claim order: (its key, the ref's index)."""
    best = None
    for i, ref in enumerate(state.segment_refs):
        key = due_key(ref, now_ms)
        if key is not None and (best is None or key < best[0]):
            best = (key, i)
    return best


def _head(key: int | None) -> Head | None:
    return None if key is None else Head(priority_of(key), key, 0)


def claim_grouped(state: QueueState, worker: str, max_jobs: int, lease_ms: int, now_ms: int,
                  tag: Callable[[str], str],
                  move_in: Callable[[QueueState, int, int], int],
                  move_in_position: Callable[[QueueState, int, int], Job | None] | None = None,
                  ) -> LeasedJobs:
    """Claim up to ``max_jobs`` jobs in the order of the module's docstring, as
    :func:`broker.model.lifecycle.claim_ready` claims (one claim record,
    fresh leases of ``lease_ms`` for ``worker``, tokens made by ``tag``).
    ``move_in`` is :func:`broker.model.segments.claims.move_in` (moves a
    segment's next jobs into the head as pending), ``move_in_position`` its
    grouped twin (:func:`broker.model.segments.claims.move_in_position`; None:
    the queue has no grouped segment). A claim whose next job lies
    in a segment with no loaded line ends there (never out of order).
    ``CorruptState`` (nothing changed) for bad group settings in the head."""
    _stepped_back(state, now_ms)
    groups = group_state(state, now_ms)
    dispatch, heaps = groups.dispatch, groups.heaps
    groups.now_ms = max(groups.now_ms, now_ms)
    groups.seen_ms = now_ms
    dispatch.sweep(now_ms)  # (per-group token buckets that refilled: dropped)
    if len(groups.names) > groups.names.cap:  # (then the names no piece refers to: released)
        release_unused(groups, {(ref.key, ref.etag) for ref in state.segment_refs})
    fifo_order = groups.settings.fifo
    promote_due(state, now_ms)  # (so claim_ready below finds nothing more to promote)
    _absorb(state, groups, now_ms)
    if state.segment_refs and grouped_refs(state) and (
            move_in_position is None or not _register(state, groups, now_ms)):
        return LeasedJobs()  # (a due grouped segment's directory is not loaded yet)
    assert move_in_position is not None or not groups.dirs
    chosen: list[int] = []  # the ready keys of the jobs picked, turn by turn
    bulk = in_bulk(state, groups)
    if bulk:
        fair_turns(state, groups, chosen, max_jobs, now_ms)
    while not bulk and len(chosen) < max_jobs:
        seg = _segment_next(state, now_ms) if state.segment_refs else None
        if seg is not None or NO_GROUP in heaps:  # (group 0: its inline jobs and the segments)
            top = live_top(state, heaps.get(NO_GROUP), now_ms)
            dispatch.set_head(NO_GROUP, _head(top if seg is None or (
                top is not None and top < seg[0]) else seg[0]), now_ms)
        picked = dispatch.pick(now_ms, max_jobs - len(chosen))
        if picked is None:
            break
        gid, q = picked
        heap = heaps.get(gid)
        fifo = fifo_order and gid != NO_GROUP
        top = live_top(state, heap, now_ms, fifo)
        if fifo and top is not None:
            now_head = _head_at(state, top, fifo)
            if dispatch.head(gid) != now_head:  # (as below; or its run-at moved)
                dispatch.served(gid, 0, now_head, now_ms)
                continue
        elif gid != NO_GROUP and top is not None and told(dispatch, gid) != top:
            # (its head went stale, cancelled or purged: picked at that job's priority
            # and age, it must compete again at its live next job's)
            dispatch.served(gid, 0, _head(top), now_ms)
            continue
        until = None
        if gid == NO_GROUP and seg is not None:
            if top is None or seg[0] < top:
                moved = move_in(state, seg[1], min(q, run_from(top, state.segment_refs,
                                                              seg[1], now_ms)))
                if not moved:
                    break  # (its lines are not loaded: answer what this claim has)
                _absorb(state, groups, now_ms)  # (the moved jobs: group 0's, first)
                heap = heaps.get(gid)
                top = live_top(state, heap, now_ms)
            after = _segment_next(state, now_ms)
            until = None if after is None else after[0]
        taken = 0
        blocked = False  # (a run's next job is not loaded: the claim ends here)
        if heap and top is not None:
            # (one turn takes jobs of its head's priority only: priority comes first)
            p = priority_of(top)
            blocked = not _take(state, groups, heap, chosen, move_in_position,  # type: ignore[arg-type]
                                fifo)
            taken = 0 if blocked else 1
            while not fifo and heap and taken < q and not blocked:  # (fifo: one a turn)
                entry = live_top(state, heap, now_ms)
                if entry is None or (until is not None and entry > until) or \
                        priority_of(entry) != p:
                    break
                blocked = not _take(state, groups, heap, chosen, move_in_position)  # type: ignore[arg-type]
                taken += 1 - blocked
        head = live_top(state, heap, now_ms, fifo)
        if not heap:
            heaps.pop(gid, None)
        if gid == NO_GROUP and state.segment_refs:
            seg = _segment_next(state, now_ms)
            if seg is not None and (head is None or seg[0] < head):
                head = seg[0]
        dispatch.served(gid, taken, _head_at(state, head, fifo), now_ms)
        if blocked:
            break
    if not chosen:
        return LeasedJobs()
    # One claim of the jobs picked, answered in claim order (priority, run-at, seq):
    # which jobs a claim takes is fair; their order within one answer is the queue's.
    chosen.sort()  # (a heap, whose order claim_ready takes them in: the answer's)
    keys = chosen[:]
    picked_n = len(chosen)
    saved, state.ready = state.ready, chosen
    try:
        out = claim_ready(state, worker, picked_n, lease_ms, now_ms, tag)
    finally:
        state.ready = saved
    if len(out) != picked_n:  # (the held counts went up by picked_n: a bug, not a refusal)
        raise IllegalMove(f"a grouped claim picked {picked_n} jobs but claimed {len(out)}")
    # The answer's groups by index (LeasedJobs.groups), read off the claimed jobs by seq, not
    # their ids (transitions._named_groups); in C loops (groups_model_bench --instructions)
    got = list(map(attrgetter("group"), map(state.jobs.entries.__getitem__,
                                            map(SEQ_MASK.__and__, keys))))
    named = dict(enumerate(got)) if all(got) else {  # (all(): no compares with None)
        i: group for i, group in enumerate(got) if group is not None}
    if named:
        out.groups = named
    return out


def group_stats(state: QueueState, now_ms: int) -> dict[str, Any] | None:
    """The ``groups`` block of stats (:meth:`GroupState.stats`), or None while
    the queue uses no groups. Takes the ready heap's new jobs into their groups
    first, as a claim would, and drops the entries of jobs cancelled or purged
    since (:func:`~broker.model.segments.group_heaps.drop_stale`, O(their groups'
    entries) once), so a group's count is exact: its due pending jobs in the head
    and grouped segments (fifo: due or not). The head is unchanged."""
    if not uses_groups(state):
        return None
    _stepped_back(state, now_ms)
    groups = group_state(state, now_ms)
    groups.seen_ms = now_ms  # (its runs registered now: a claim at an earlier time rebuilds)
    promote_due(state, now_ms)
    _absorb(state, groups, now_ms)
    grouped = bool(state.segment_refs) and grouped_refs(state)
    if grouped:
        _register(state, groups, now_ms)
    if groups.stale or groups.twice:  # (group 0's with segments: the claim sets it, from them)
        for gid in drop_stale(state, groups, now_ms):
            if gid != NO_GROUP or not state.segment_refs:
                _refresh(state, groups, gid, now_ms)
    more: dict[int, int] = {}
    if grouped:
        for ref in state.segment_refs:  # (O(runs of the loaded grouped segments))
            d = groups.dirs.get((ref.key, ref.etag))
            if d is None:
                continue
            starts, gids = d.starts, d.gids
            early = (ref.key, ref.etag) in groups.early  # (its group 0 runs go in once due)
            for r in range(d.runs):
                if early and gids[r] == NO_GROUP:
                    continue
                n = starts[r + 1] - starts[r] - taken_between(ref, starts[r], starts[r + 1])
                if n > 1:  # (the run's next job is its one entry in its group's heap)
                    more[gids[r]] = more.get(gids[r], 0) + n - 1
    return groups.stats(more=more)
