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

(Retry-waiting pending jobs are candidates too in the design; this module
plans dead ones only so far. The plan is not yet called by the commit's
``before_write``: see docs/architecture.md, "Spill objects".)
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.model.format.spill_format import EncodedSpill, ErrorEntry, SpilledJob, encode_spills
from broker.model.format.spill_refs import SpillRef
from broker.model.job import DEAD, Job
from broker.model.lifecycle import GONE, move
from broker.model.state import QueueState

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
