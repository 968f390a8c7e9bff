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

Redrive and purge of spilled dead jobs (:func:`redrive_spilled`,
:func:`purge_dead`): a purge drops every dead ref (its object deleted once
the commit landed, as a segment's); a redrive copies the jobs of the dead
objects the broker loaded for the batch (:func:`redrive_loads`: at most
:data:`REDRIVE_JOBS` jobs a commit, within the queue's ``max_state_bytes``)
back into the head as pending, attempts 0, due now, their last error kept;
an object all of whose jobs went back is dropped, one that a redrive by id
took some jobs of keeps them as ``out`` positions. (Not yet by reference:
the design's pending ref with ``reset_at`` needs spill refs as claim
sources.)

(Retry-waiting pending jobs are candidates too in the design; this module
plans dead ones only so far. The plan is called by the commit's
``before_write``: :mod:`broker.service.spill_writer`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.model.format.spill_format import EncodedSpill, ErrorEntry, SpilledJob, encode_spills
from broker.model.format.spill_refs import SpillRef, is_out, live_count, with_out
from broker.model.job import DEAD, PENDING, Job, seq_of
from broker.model.lifecycle import GONE, move
from broker.model.ops import Inspect, ReadJobs, Redrive
from broker.model.state import MAX_WINDOWS, QueueState

#: Bytes a spilled job's line costs besides its payload, key and error text
#: (its fields' names and numbers; an estimate for the rule, not a bound).
LINE_OVERHEAD = 160
#: Most jobs one redrive (of every dead job) copies back from spill objects into
#: the head in one commit (at least one object's); a later redrive takes the rest.
REDRIVE_JOBS = 65_536


@dataclass(frozen=True, slots=True)
class SpillPlan:
    """The dead jobs (by seq) that leave the head and the objects holding them
    (their bytes, as the model computed them), or nothing to do."""

    seqs: tuple[int, ...]
    objects: tuple[EncodedSpill, ...]


NOTHING = SpillPlan((), ())


def spillable(job: Job) -> bool:
    """Whether ``job`` is a candidate: dead, its payload free of raw line
    breaks, of no group (a fifo group's dead head holds its group, which its
    groups' state reads from the head: it stays inline)."""
    return job.status == DEAD and job.group is None and b"\n" not in job.payload


def estimated_bytes(job: Job) -> int:
    """A candidate's line bytes in a spill object (payload, key, error text and
    :data:`LINE_OVERHEAD`): what ``spill_bytes`` is compared with."""
    return LINE_OVERHEAD + len(job.payload) + len(job.key or "") + len(job.last_error or "")


def spilled(job: Job, now_ms: int) -> SpilledJob:
    """``job`` as a spill object holds it. Its history is its ``last_error``
    at its last attempt (at least 1), failed at ``now_ms`` at the latest (the
    head keeps no failure time: ``now_ms``, an upper bound, stands for it);
    no entry without an error text."""
    errors = () if job.last_error is None else \
        (ErrorEntry(max(1, job.attempts), now_ms, job.last_error),)
    return SpilledJob(seq=job.seq, payload=job.payload, priority=job.priority,
                      run_at_ms=job.run_at_ms, attempts=job.attempts,
                      max_attempts=job.max_attempts, created_ms=job.created_ms,
                      key=job.key, errors=errors)


def plan_dead(state: QueueState, queue: str, spill_jobs: int, spill_bytes: int,
              now_ms: int) -> SpillPlan:
    """The dead jobs of ``state`` (of ``queue``) that leave the head in this
    commit and their objects, by the rule (module docstring): :data:`NOTHING`
    when ``spill_jobs`` is 0 (nothing scanned) or the candidates hold no more
    than ``spill_jobs`` jobs and ``spill_bytes`` bytes. O(the head's job
    objects: untouched pushed lines are never dead). Never raises for a
    valid state."""
    if spill_jobs <= 0:
        return NOTHING
    candidates = [job for job in state.jobs.touched() if spillable(job)]
    if len(candidates) <= spill_jobs and \
            sum(map(estimated_bytes, candidates)) <= spill_bytes:
        return NOTHING
    objects = encode_spills(queue, DEAD, [spilled(job, now_ms) for job in candidates])
    return SpillPlan(tuple(job.seq for job in candidates), tuple(objects))


def attach(state: QueueState, plan: SpillPlan, refs: list[SpillRef], now_ms: int) -> None:
    """The commit's final change once every object of ``plan`` was written:
    its jobs leave the head (their heap entries go stale; the size estimate
    drops) and ``refs`` (one per object of ``plan``, in its order) join
    ``"spills"``. Spilling moves jobs, it changes no status: counts stay as
    they were (a ref's jobs are counted from it). ``ValueError``, having
    changed nothing, if ``refs`` do not match ``plan``'s objects or a job of
    the plan is no longer a dead job of the head."""
    if len(refs) != len(plan.objects) or any(
            ref.kind != DEAD or ref.count != obj.count or ref.seqs != obj.seqs
            for ref, obj in zip(refs, plan.objects, strict=True)):
        raise ValueError("the spill references do not match the planned objects")
    jobs = [state.jobs.get(seq) for seq in plan.seqs]
    if any(job is None or not spillable(job) for job in jobs):
        raise ValueError("a planned job is no longer a dead job of the head")
    for job in jobs:
        assert job is not None
        move(state, job, GONE, now_ms)
    state.spill_refs.extend(refs)


# -- redrive and purge ----------------------------------------------------------------


def _dead_refs(state: QueueState) -> list[SpillRef]:
    return [ref for ref in state.spill_refs
            if isinstance(ref, SpillRef) and ref.kind == DEAD]


def redrive_loads(state: QueueState, ids: Sequence[str] | None) -> list[SpillRef]:
    """The dead spill refs whose jobs a redrive of ``ids`` (None: every dead
    job) reads: for all, the refs in the head's order up to
    :data:`REDRIVE_JOBS` live jobs (at least one ref); for ids, those whose
    ``seqs`` bounds hold one of them, at most :data:`~broker.model.state.MAX_WINDOWS`
    (an id beyond is not redriven by this call)."""
    dead = _dead_refs(state)
    if ids is None:
        out: list[SpillRef] = []
        total = 0
        for ref in dead:
            if out and total + ref.live > REDRIVE_JOBS:
                break
            out.append(ref)
            total += ref.live
        return out
    seqs = [seq for seq in map(seq_of, ids) if seq is not None]
    return [ref for ref in dead
            if any(ref.seqs[0] <= seq <= ref.seqs[1] for seq in seqs)][:MAX_WINDOWS]


def redrive_spilled(state: QueueState, ids: Sequence[str] | None, now_ms: int) -> list[Job]:
    """Redrive the spilled dead jobs of ``ids`` (None: all) whose objects are
    loaded (``state.spill_windows``, by :func:`redrive_loads`): each back in
    the head as pending with no attempts, due at ``now_ms``, its last error
    kept. A ref all of whose live jobs went back is dropped (its object
    deleted once this commit landed); else the jobs taken are its ``out``.
    Stops before an object whose jobs would pass the queue's
    ``max_state_bytes`` (a later redrive takes them). Returns the jobs
    redriven, in the refs' order."""
    wanted = None if ids is None else {seq for seq in map(seq_of, ids) if seq is not None}
    room = state.settings.max_state_bytes - state.size_estimate()
    moved: list[Job] = []
    refs: list[SpillRef] = []
    for ref in list(state.spill_refs):
        assert isinstance(ref, SpillRef)
        jobs = state.spill_windows.get((ref.key, ref.etag)) if ref.kind == DEAD else None
        if jobs is None or len(jobs) != ref.count:
            refs.append(ref)
            continue
        picks = [pos for pos in range(ref.count) if not is_out(ref, pos)
                 and (wanted is None or jobs[pos].seq in wanted)]
        back = [jobs[pos].redriven(now_ms).to_job(PENDING) for pos in picks]
        cost = sum(job.size_estimate() for job in back)
        if not picks or cost > room:
            refs.append(ref)
            continue
        room -= cost
        for job in back:
            move(state, job, PENDING, now_ms)
        moved += back
        for pos in picks:
            ref = with_out(ref, pos)
        if live_count(ref):
            refs.append(ref)
        else:
            state.dropped_refs.append(ref)
    state.spill_refs[:] = refs
    return moved


def purge_dead(state: QueueState) -> int:
    """Drop every dead spill ref (their objects deleted once this commit
    landed); how many live jobs they held."""
    dead = _dead_refs(state)
    if not dead:
        return 0
    state.spill_refs[:] = [ref for ref in state.spill_refs if ref.kind != DEAD]
    state.dropped_refs.extend(dead)
    return sum(ref.live for ref in dead)


# -- reads: pages and lookups over spilled dead jobs --------------------------------


def _loaded(state: QueueState, ref: SpillRef) -> list[SpilledJob] | None:
    jobs = state.spill_windows.get((ref.key, ref.etag))
    return jobs if jobs is not None and len(jobs) == ref.count else None


def page_refs(state: QueueState, status: str | None, after_seq: int) -> list[SpillRef]:
    """The dead spill refs a page of jobs (of ``status``) after seq
    ``after_seq`` may show jobs of, by the lowest seq each may show."""
    if status not in (None, DEAD):
        return []
    refs = [ref for ref in _dead_refs(state) if ref.seqs[1] > after_seq]
    refs.sort(key=lambda ref: max(ref.seqs[0], after_seq + 1))
    return refs


def spill_page(state: QueueState, status: str | None, after_seq: int,
               n: int) -> tuple[list[Job], int | None]:
    """Up to ``n`` spilled dead jobs (of ``status``: none but for None or
    dead) after seq ``after_seq`` in seq order, as throwaway jobs, from the
    loaded objects of :func:`page_refs`, and the seq a page must end before:
    the lowest seq the first unloaded one may show (None if all are loaded).
    Positions taken out are not shown."""
    jobs: list[Job] = []
    cut: int | None = None
    for ref in page_refs(state, status, after_seq):
        loaded = _loaded(state, ref)
        if loaded is None:
            cut = max(ref.seqs[0], after_seq + 1)
            break
        jobs += [job.to_job(DEAD) for pos, job in enumerate(loaded)
                 if job.seq > after_seq and not is_out(ref, pos)]
    jobs.sort(key=lambda job: job.seq)
    if cut is not None:
        jobs = [job for job in jobs if job.seq < cut]
    return jobs[:n], cut


def holders(state: QueueState, seq: int) -> list[SpillRef]:
    """The dead spill refs whose seq bounds hold ``seq`` (at most
    :data:`~broker.model.state.MAX_WINDOWS`): where a lookup reads."""
    return [ref for ref in _dead_refs(state)
            if ref.seqs[0] <= seq <= ref.seqs[1]][:MAX_WINDOWS]


def spilled_job(state: QueueState, seq: int) -> Job | None:
    """Dead job ``seq`` of a loaded spill object (a throwaway job), or None
    (not in one, taken out, or its object not loaded)."""
    for ref in holders(state, seq):
        for pos, job in enumerate(_loaded(state, ref) or ()):
            if job.seq == seq:
                return None if is_out(ref, pos) else job.to_job(DEAD)
    return None


def spill_loads(state: QueueState, op: object) -> list[SpillRef]:
    """The spill refs whose jobs ``op`` reads (the broker loads them before it
    applies, at most :data:`~broker.model.state.MAX_WINDOWS` of them but for
    a redrive): a redrive's (:func:`redrive_loads`), a page's of jobs
    (:class:`~broker.model.ops.ReadJobs`), a lookup's of one job
    (:class:`~broker.model.ops.Inspect` ``job``, ``find``, ``lookup``)."""
    if not state.spill_refs:
        return []
    if isinstance(op, Redrive):
        return redrive_loads(state, op.ids)
    if isinstance(op, ReadJobs):
        text = op.after
        if text is not None and not (isinstance(text, str) and text[:1] == "j"
                                     and text[1:].isdecimal() and len(text) < 20):
            return []  # (the page itself is refused)
        after = -1 if text is None else int(text[1:])
        return page_refs(state, op.status, after)[:MAX_WINDOWS]
    if isinstance(op, Inspect) and op.view in ("job", "find", "lookup") and op.args:
        seq = seq_of(op.args[-1]) if isinstance(op.args[-1], str) else None
        return [] if seq is None else holders(state, seq)
    return []
