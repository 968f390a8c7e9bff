"""Which failed jobs leave the head into spill objects, and their bytes: the
spill rule's pure half (dead jobs off the head). Pure: the state and the time
in, the objects' bytes out; nothing here writes or changes the state.

**Candidates** are the head's dead jobs whose payload holds no raw line break
(a payload with one cannot be a line of a spill object: its job stays
inline). **The rule**: if the candidates hold more than ``spill_jobs`` jobs or
more than ``spill_bytes`` bytes of estimated line bytes, all of them go, in
one dead object (split at :data:`~broker.model.format.spill_format.MAX_SPILL_JOBS`
jobs / :data:`~broker.model.format.spill_format.MAX_SPILL_BYTES`); below both
they stay inline. ``spill_jobs`` 0 turns spilling off.

Redrive and purge **by reference** (:func:`redrive_spilled`,
:func:`purge_spilled`): a redrive of every dead job turns each dead ref
into a pending one (:func:`~broker.model.format.spill_refs.redriven`: its
jobs pending, attempts 0, due now, errors kept; one edit a ref, nothing read
or copied); a claim then moves the next jobs of the due, loaded pending refs
into the head, in claim order, as a segment's (:func:`move_in`), and a ref
whose jobs are all taken is dropped. A purge drops the refs of its statuses
(their objects deleted once that commit landed, as a segment's). A redrive
by id copies the job back into the head (its object loaded by the broker
first: :func:`spill_loads`) and takes its position ``out`` of the ref.

(Retry-waiting pending jobs are candidates too in the design; this module
plans dead ones only so far. The plan is called by the commit's
``before_write``: :mod:`broker.service.spill_writer`.)
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from broker.model.format import codec
from broker.model.format.spill_format import EncodedSpill, SpilledJob, encode_spills
from broker.model.format.spill_refs import (
    SpillRef,
    redriven,
    with_out,
)
from broker.model.groups.counts import left_hook
from broker.model.indexes import ready_key, schedule
from broker.model.job import DEAD, PENDING, Job, seq_of
from broker.model.lifecycle import GONE, move
from broker.model.ops import Cancel, Claim, Inspect, ReadJobs, Redrive
from broker.model.spill_parts import due_refs, loaded, shown, window_name
from broker.model.state import MAX_WINDOWS, QueueState

__all__ = ["claim_refs", "window_name"]

#: Bytes a spilled job's line costs besides its payload, key and error text
#: (its fields' names and numbers; an estimate for the rule, not a bound).
LINE_OVERHEAD = 160


@dataclass(frozen=True, slots=True)
class SpillPlan:
    """The dead jobs (by seq) that leave the head and the objects holding them
    (their bytes, as the model computed them), or nothing to do."""

    seqs: tuple[int, ...]
    objects: tuple[EncodedSpill, ...]


NOTHING = SpillPlan((), ())


def spillable(job: Job, pending: bool = False) -> bool:
    """Whether ``job`` is a candidate: dead (or, with ``pending``, pending and
    kept as a job object: retried, released, pushed with options), its
    payload free of raw line breaks, of no group (a fifo group's dead head
    holds its group, which its groups' state reads from the head: it stays
    inline)."""
    return (job.status == DEAD or (pending and job.status == PENDING)) \
        and job.group is None and b"\n" not in job.payload


def estimated_bytes(job: Job) -> int:
    """A candidate's line bytes in a spill object (payload, key, error texts and
    :data:`LINE_OVERHEAD`): what ``spill_bytes`` is compared with."""
    return LINE_OVERHEAD + len(job.payload) + len(job.key or "") + sum(
        len(entry.text) for entry in job.errors)


def spilled(job: Job) -> SpilledJob:
    """``job`` as a spill object holds it, its error history whole (each
    entry's attempt and failure time as the fail recorded them)."""
    return SpilledJob(seq=job.seq, payload=job.payload, priority=job.priority,
                      run_at_ms=job.run_at_ms, attempts=job.attempts,
                      max_attempts=job.max_attempts, created_ms=job.created_ms,
                      key=job.key, errors=job.errors)


def plan_dead(state: QueueState, queue: str, spill_jobs: int, spill_bytes: int,
              now_ms: int, pending: bool = False) -> SpillPlan:
    """The dead jobs of ``state`` (of ``queue``; with ``pending`` its pending
    job objects too: retry-waiting, released) that leave the head in this
    commit and their objects, by the rule (module docstring): :data:`NOTHING`
    when ``spill_jobs`` is 0 (nothing scanned) or the candidates hold no more
    than ``spill_jobs`` jobs and ``spill_bytes`` bytes. Dead ones go into dead
    objects, pending ones into pending objects, one or more per priority
    (sorted by run-at: claims take them in order). O(the head's job objects:
    untouched pushed lines are never candidates). Never raises for a valid
    state."""
    if spill_jobs <= 0:
        return NOTHING
    candidates = [job for job in state.jobs.touched() if spillable(job, pending)]
    if len(candidates) <= spill_jobs and \
            sum(map(estimated_bytes, candidates)) <= spill_bytes:
        return NOTHING
    objects: list[EncodedSpill] = []
    seqs: list[int] = []
    for kind in (DEAD, PENDING):
        jobs = [job for job in candidates if job.status == kind]
        if jobs:
            objects += encode_spills(queue, kind, [spilled(job) for job in jobs])
            seqs += [job.seq for job in jobs]
    return SpillPlan(tuple(seqs), tuple(objects))


def attach(state: QueueState, plan: SpillPlan, refs: list[SpillRef], now_ms: int) -> None:
    """The commit's final change once every object of ``plan`` was written:
    its jobs leave the head (their heap entries go stale; the size estimate
    drops) and ``refs`` (one per object of ``plan``, in its order) join
    ``"spills"``. Spilling moves jobs, it changes no status: counts stay as
    they were (a ref's jobs are counted from it). ``ValueError``, having
    changed nothing, if ``refs`` do not match ``plan``'s objects or a job of
    the plan is no longer a dead job of the head."""
    if len(refs) != len(plan.objects) or any(
            ref.kind != obj.kind or ref.count != obj.count or ref.seqs != obj.seqs
            for ref, obj in zip(refs, plan.objects, strict=True)):
        raise ValueError("the spill references do not match the planned objects")
    jobs = [state.jobs.get(seq) for seq in plan.seqs]
    if any(job is None or not spillable(job, True) for job in jobs):
        raise ValueError("a planned job is no longer a dead job (or a pending one) of the head")
    for job in jobs:
        assert job is not None
        left_hook(state.groups, job)  # (pending: its entry in its group's heap goes stale)
        move(state, job, GONE, now_ms)
    state.spill_refs.extend(refs)


# -- redrive, purge, claims -----------------------------------------------------------


def _refs(state: QueueState, kind: str | None = None) -> list[SpillRef]:
    """The head's spill refs (of ``kind``: dead or pending; None: both)."""
    return [ref for ref in state.spill_refs
            if isinstance(ref, SpillRef) and (kind is None or ref.kind == kind)]


_loaded = loaded
_shown = shown


def redrive_loads(state: QueueState, ids: Sequence[str] | None) -> list[SpillRef]:
    """The dead spill refs whose jobs a redrive of ``ids`` reads: none for a
    redrive of every dead job (by reference); for ids, every one whose
    ``seqs`` bounds hold one of them, once each (an id is redriven wherever
    its job is; the ids of one call are at most ``MAX_ITEMS``, and the dead
    refs few once merged: :mod:`broker.model.spill_compaction`). O(refs + ids)."""
    if ids is None:
        return []
    seqs = sorted({seq for seq in map(seq_of, ids) if seq is not None})
    if not seqs:
        return []
    out = []
    for ref in _refs(state, DEAD):
        at = bisect.bisect_left(seqs, ref.seqs[0])
        if ref.live and at < len(seqs) and seqs[at] <= ref.seqs[1]:
            out.append(ref)
    return out


def redrive_spilled(state: QueueState, ids: Sequence[str] | None, now_ms: int) -> int:
    """Redrive the spilled dead jobs of ``ids`` (None: all); how many.

    All: by reference, every dead ref becomes a pending ref due at
    ``now_ms`` (nothing read or copied; its jobs come back by :func:`move_in`).
    By id: each job found in a loaded object (:func:`redrive_loads`: every
    object that may hold one of them is loaded first) is copied
    into the head as pending with no attempts, due at ``now_ms``, its error
    history kept, and its position taken ``out`` of its ref (a ref left with
    no job is dropped: its object deleted once this commit landed); an id
    whose object is not loaded is not redriven."""
    if ids is None:
        count = 0
        for i, ref in enumerate(state.spill_refs):
            if isinstance(ref, SpillRef) and ref.kind == DEAD:
                count += ref.live
                state.spill_refs[i] = redriven(ref, now_ms)
        return count
    wanted = {seq for seq in map(seq_of, ids) if seq is not None}
    moved = 0
    refs: list[SpillRef] = []
    for ref in _refs(state):
        jobs = _loaded(state, ref) if ref.kind == DEAD else None
        for pos, job in _shown(ref, jobs) if jobs is not None else ():
            if job.seq in wanted:
                _insert_pending(state, job.redriven(now_ms).to_job(PENDING), now_ms)
                ref = with_out(ref, pos)
                moved += 1
        if ref.live or ref.key in state.seg_names:  # (named: its held jobs' object)
            refs.append(ref)
        else:
            state.dropped_refs.append(ref)
    state.spill_refs[:] = refs
    return moved


def purge_spilled(state: QueueState, statuses: Sequence[str]) -> int:
    """Drop every spill ref of ``statuses`` (dead, pending: a redriven ref's
    untaken jobs); their objects go once this commit landed. How many live
    jobs they held."""
    doomed = [ref for ref in _refs(state) if ref.kind in statuses]
    if not doomed:
        return 0
    named = state.seg_names  # (a ref a claim record names stays, every job taken)
    state.spill_refs[:] = [
        ref if ref not in doomed else _advanced(ref, ref.count, [])
        for ref in state.spill_refs if ref not in doomed or ref.key in named]
    state.dropped_refs.extend(ref for ref in doomed if ref.key not in named)
    return sum(ref.live for ref in doomed)


claim_refs = due_refs


def move_in(state: QueueState, budget: int, now_ms: int) -> bool:
    """Before a claim of up to ``budget`` jobs: move the best ``budget`` jobs,
    in claim order, of the due pending refs whose jobs are loaded into the
    head as pending jobs (the claim then takes the best of them and the
    head's own); each ref's cursor advances past what it gave, and a ref
    with no job left is dropped (its object deleted once this commit
    landed). Whether anything moved."""
    streams = []
    for ref in claim_refs(state, now_ms):
        jobs = _loaded(state, ref)
        if jobs is not None:
            streams.append(_keyed(ref, jobs, now_ms))
    if not streams or budget <= 0:
        return False
    upto: dict[str, int] = {}
    for _, pos, key, job in _first(heapq.merge(*streams, key=lambda item: item[:3]), budget):
        _insert_pending(state, job.to_job(PENDING), now_ms)
        upto[key] = pos + 1
    refs: list[SpillRef] = []
    for ref in _refs(state):
        if ref.key in upto:
            ref = _advanced(ref, upto[ref.key], _loaded(state, ref) or [])
        if ref.live or ref.kind != PENDING or ref.key in state.seg_names:
            refs.append(ref)
        else:
            state.dropped_refs.append(ref)
    state.spill_refs[:] = refs
    return bool(upto)


def _insert_pending(state: QueueState, job: Job, now_ms: int) -> None:
    """Put pending ``job`` of a spill object into the head (its seq may lie
    below others': as a job moved in from a segment), indexed as due."""
    state.jobs.insert(job.seq, job)
    codec.inserted_many(state, job.seq, 1)
    state.approx_bytes += job.size_estimate()
    schedule(state, job, now_ms)


def _keyed(ref: SpillRef, jobs: list[SpilledJob],
           now_ms: int) -> Iterator[tuple[int, int, str, SpilledJob]]:
    """``ref``'s jobs from its cursor on as (claim key, position, its key, job),
    up to the first not due at ``now_ms`` (a pending object's lines are by
    run-at: none after it is due either)."""
    for pos, job in _shown(ref, jobs):
        if job.run_at_ms > now_ms:
            return
        yield ready_key(job.priority, job.run_at_ms, job.seq), pos, ref.key, job


def _first(items: Iterator[tuple[int, int, str, SpilledJob]],
           n: int) -> Iterator[tuple[int, int, str, SpilledJob]]:
    for i, item in enumerate(items):
        if i >= n:
            return
        yield item


def _advanced(ref: SpillRef, taken: int, jobs: list[SpilledJob]) -> SpillRef:
    """Pending ``ref`` with its cursor at ``taken``: ``next``, ``priority`` and
    ``due_min`` its cursor line's (None once every job is taken)."""
    if taken >= ref.count:
        return replace(ref, taken=ref.count, next=None, due_min=None)
    line = jobs[taken]  # (the earliest due of the rest: lines are by run-at)
    return replace(ref, taken=taken, priority=line.priority,
                   next=(line.run_at_ms, line.seq), due_min=line.run_at_ms)


#: What :func:`take_out` found of a seq: its object not loaded, or nothing.
UNLOADED = "unloaded"


def take_out(state: QueueState, seq: int, now_ms: int) -> Job | str | None:
    """Job ``seq`` of a spill object, for a cancel: a pending one (of a
    redriven ref) is moved into the head as pending (its position taken
    ``out`` of the ref; a ref left with no job is dropped) and returned; a dead
    one is returned as a throwaway job (nothing changed). :data:`UNLOADED` if
    no loaded object holds it but one not loaded may, None if none holds it."""
    unloaded = False  # (one that may hold it is not loaded: look in the loaded ones first)
    for ref in holders(state, seq):
        jobs = _loaded(state, ref)
        if jobs is None:
            unloaded = True
            continue
        for pos, job in _shown(ref, jobs):
            if job.seq != seq:
                continue
            if ref.kind == DEAD:
                return job.to_job(DEAD)
            moved = job.to_job(PENDING)
            _insert_pending(state, moved, now_ms)
            at = state.spill_refs.index(ref)
            left = with_out(ref, pos)
            if left.live or left.key in state.seg_names:
                state.spill_refs[at] = left
            else:
                del state.spill_refs[at]
                state.dropped_refs.append(left)
            return moved
    return UNLOADED if unloaded else None


def next_due_ms(state: QueueState, now_ms: int) -> int | None:
    """When the next job of a pending spill ref not due at ``now_ms`` falls
    due (the commit loop's timer wakes the claims then), or None."""
    later = [ref.next[0] for ref in _refs(state, PENDING)
             if ref.next is not None and ref.next[0] > now_ms]
    return min(later, default=None)


def has_due(state: QueueState, now_ms: int) -> bool:
    """Whether a pending spill ref has a job due at ``now_ms``."""
    return any(ref.next is not None and ref.next[0] <= now_ms for ref in _refs(state, PENDING))


def pending_times(state: QueueState) -> list[tuple[int, int]]:
    """(earliest due, earliest created) of each pending spill ref with jobs
    left (ms): for stats' oldest pending age (an upper bound: the object's
    earliest creation) and next delayed run."""
    return [(ref.due_min, ref.created_min) for ref in _refs(state, PENDING)
            if ref.due_min is not None and ref.live]


def spill_figures(state: QueueState) -> dict[str, dict[str, int]]:
    """Stats' ``in_spills`` (jobs the refs hold) and ``spill_objects`` (refs),
    each by kind (pending: redriven; dead): O(refs)."""
    jobs, objects = {PENDING: 0, DEAD: 0}, {PENDING: 0, DEAD: 0}
    for ref in state.spill_refs:
        jobs[ref.kind] += ref.live
        objects[ref.kind] += 1
    return {"in_spills": jobs, "spill_objects": objects}


# -- reads: pages and lookups over spilled jobs -------------------------------------


def page_refs(state: QueueState, status: str | None, after_seq: int) -> list[SpillRef]:
    """The spill refs a page of jobs (of ``status``) after seq ``after_seq``
    may show jobs of (dead refs for dead, pending ones for pending), by the
    lowest seq each may show."""
    kinds = [kind for kind in (DEAD, PENDING) if status in (None, kind)]
    refs = [ref for ref in _refs(state) if ref.kind in kinds and ref.live
            and ref.seqs[1] > after_seq]
    refs.sort(key=lambda ref: max(ref.seqs[0], after_seq + 1))
    return refs


def spill_page(state: QueueState, status: str | None, after_seq: int,
               n: int) -> tuple[list[Job], int | None]:
    """Up to ``n`` spilled jobs (of ``status``) after seq ``after_seq`` in seq
    order, as throwaway jobs, from the loaded objects of :func:`page_refs`,
    and the seq a page must end before: the lowest seq the first unloaded
    one may show (None if all are loaded). Jobs a ref no longer holds (taken
    by its cursor, or out) are not shown."""
    jobs: list[Job] = []
    cut: int | None = None
    for ref in page_refs(state, status, after_seq):
        loaded = _loaded(state, ref)
        if loaded is None:
            cut = max(ref.seqs[0], after_seq + 1)
            break
        jobs += [job.to_job(ref.kind) for _, job in _shown(ref, loaded) if job.seq > after_seq]
    jobs.sort(key=lambda job: job.seq)
    if cut is not None:
        jobs = [job for job in jobs if job.seq < cut]
    return jobs[:n], cut


def back_refs(state: QueueState, status: str | None, before_seq: int) -> list[SpillRef]:
    """The spill refs (of ``status``'s kinds) that may show jobs below
    ``before_seq``, by the highest seq each may show there, descending: what a
    page backwards from ``before_seq`` loads, every one tied at the top and
    then up to :data:`~broker.model.state.MAX_WINDOWS` (:func:`spilled_before`
    stops below the first one not loaded)."""
    kinds = [kind for kind in (DEAD, PENDING) if status in (None, kind)]
    refs = [ref for ref in _refs(state) if ref.kind in kinds and ref.live
            and ref.seqs[0] < before_seq]
    refs.sort(key=lambda ref: -min(ref.seqs[1], before_seq - 1))
    top = min(refs[0].seqs[1], before_seq - 1) if refs else 0
    tied = sum(1 for ref in refs if ref.seqs[1] >= top)
    return refs[:max(MAX_WINDOWS, tied)]


def spilled_before(state: QueueState, status: str | None, before_seq: int,
                   n: int) -> tuple[list[int], int]:
    """The seqs of the last ``n`` spilled jobs (of ``status``) below
    ``before_seq``, descending, that the loaded objects show, and the floor:
    the highest seq an unloaded object may show below ``before_seq`` (-1 if
    every one that may is loaded). Below the floor the seqs are not known:
    a page counting back stops there (the seqs returned are all above it)."""
    kinds = [kind for kind in (DEAD, PENDING) if status in (None, kind)]
    floor = -1
    found: list[int] = []
    for ref in _refs(state):
        if ref.kind not in kinds or not ref.live or ref.seqs[0] >= before_seq:
            continue
        jobs = _loaded(state, ref)
        if jobs is None:
            floor = max(floor, min(ref.seqs[1], before_seq - 1))
            continue
        found += [job.seq for _, job in _shown(ref, jobs) if job.seq < before_seq]
    found = sorted((seq for seq in found if seq > floor), reverse=True)
    return found[:n], floor


def first_spilled_after(state: QueueState, status: str | None, after_seq: int) -> int | None:
    """The lowest seq above ``after_seq`` a spill ref (of ``status``'s kinds)
    shows: exact for a loaded object, else the lowest it may show (its
    ``seqs`` bound); None if none may. (Whether a page has more after it.)"""
    kinds = [kind for kind in (DEAD, PENDING) if status in (None, kind)]
    best: int | None = None
    for ref in _refs(state):
        if ref.kind not in kinds or not ref.live or ref.seqs[1] <= after_seq:
            continue
        jobs = _loaded(state, ref)
        if jobs is None:
            seq: int | None = max(ref.seqs[0], after_seq + 1)
        else:
            seq = min((job.seq for _, job in _shown(ref, jobs) if job.seq > after_seq),
                      default=None)
        if seq is not None and (best is None or seq < best):
            best = seq
    return best


def holders(state: QueueState, seq: int) -> list[SpillRef]:
    """The spill refs still holding jobs whose seq bounds hold ``seq``: where a
    lookup reads. All of them: bounds overlap (an old job that dies with new
    ones widens its object's), and the one holding ``seq`` may come after
    any number of others; a lookup reads each (one GET an object)."""
    return [ref for ref in _refs(state)
            if ref.live and ref.seqs[0] <= seq <= ref.seqs[1]]


def first_holders(groups: Sequence[list[SpillRef]]) -> list[SpillRef]:
    """The refs of ``groups`` (the :func:`holders` of each id of a call, in
    order), once each: every one of the first id's (so that a call for one
    job, or retried for its first, always finds it), then the others' up to
    :data:`~broker.model.state.MAX_WINDOWS` in all."""
    out = dict.fromkeys(groups[0]) if groups else {}
    for group in groups[1:]:
        for ref in group:
            if len(out) >= MAX_WINDOWS:
                return list(out)
            out.setdefault(ref)
    return list(out)


def spilled_job(state: QueueState, seq: int) -> Job | None:
    """Job ``seq`` of a loaded spill object that its ref still holds (a
    throwaway job, dead or pending as its ref), or None."""
    for ref in holders(state, seq):
        for _, job in _shown(ref, _loaded(state, ref) or []):
            if job.seq == seq:
                return job.to_job(ref.kind)
    return None


def spill_loads(state: QueueState, op: object, now_ms: int) -> list[SpillRef]:
    """The spill refs whose jobs ``op`` reads (the broker loads them before it
    applies, at most :data:`~broker.model.state.MAX_WINDOWS` each): a claim's
    (:func:`claim_refs`, due at ``now_ms``), a redrive by id's
    (:func:`redrive_loads`), a cancel's (:func:`take_out`), a page's of jobs
    (:class:`~broker.model.ops.ReadJobs`: every one that may show the page's
    first seq, then up to the bound),
    a dashboard page's backwards from a seq (``page`` with ``before_seq``:
    :func:`back_refs`; its forward part is planned as a page of jobs),
    a lookup's of one job (:class:`~broker.model.ops.Inspect` ``job``,
    ``find``, ``lookup``; a ``find`` by idempotency key, its job's)."""
    if not state.spill_refs:
        return []
    if isinstance(op, Claim):
        return claim_refs(state, now_ms)
    if isinstance(op, Redrive):
        return redrive_loads(state, op.ids)
    if isinstance(op, Cancel):
        seqs = [seq for seq in map(seq_of, op.ids) if seq is not None]
        return first_holders([holders(state, seq) for seq in seqs])
    if isinstance(op, ReadJobs):
        text = op.after
        if text is not None and not (isinstance(text, str) and text[:1] == "j"
                                     and text[1:].isdecimal() and len(text) < 20):
            return []  # (the page itself is refused)
        after = -1 if text is None else int(text[1:])
        refs = page_refs(state, op.status, after)
        # (every one that may show the very next seq, else a page cut there makes no
        # progress when more than MAX_WINDOWS objects' bounds overlap it)
        tied = sum(1 for ref in refs if ref.seqs[0] <= after + 1)
        return refs[:max(MAX_WINDOWS, tied)]
    if isinstance(op, Inspect) and op.view == "page" and len(op.args) == 4:
        status, after_seq, before_seq, _ = op.args  # (a page backwards: counts back first)
        if after_seq is None and isinstance(before_seq, int) and \
                status in (None, DEAD, PENDING):
            return back_refs(state, status, before_seq)
        return []
    if isinstance(op, Inspect) and op.view in ("job", "find", "lookup") and op.args:
        text = op.args[-1]
        seq = seq_of(text) if isinstance(text, str) else None
        if seq is None and op.view == "find" and isinstance(text, str):  # (by its key)
            entry = state.keys.get(text)
            seq = None if entry is None else seq_of(entry.job_id)
        return [] if seq is None else holders(state, seq)
    return []
