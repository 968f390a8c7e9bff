"""The derived indexes of a queue state: three heaps of packed int keys, and
their rebuild.

Never stored: rebuilt from the jobs on load (:func:`rebuild_indexes`) and kept
by :mod:`broker.model.lifecycle` on every change of a job. Entries go stale instead
of being removed (a heap cannot drop an inner entry cheaply); readers check an
entry against its job.

* ``state.ready``: :func:`ready_key` of pending jobs that may be runnable;
* ``state.delayed``: :func:`timed_key` (run-at, seq) of pending jobs due later;
* ``state.leases``: :func:`lease_key` (lease expiry, fence) of claim records:
  one entry a claim (:mod:`broker.model.claim_records`), however many jobs it
  holds, so a claim of 2,000 jobs or its heartbeat pushes one entry, not 2,000.

Each entry is one int, not a tuple: a heap of ints pops about three times
faster (``bench/broker_bench.py``, claim rows). Low bits: the job's seq; above
them a time in ms; above that (ready heap only) the priority, turned so that
higher pops first. The lease heap's low bits are a record's fence, which has
:data:`FENCE_BITS` (lease numbers go up to ``2**62``, past a seq's 48 bits).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from broker.limits import MAX_PRIORITY
from broker.model.job import CLAIMED, FINISHED, PENDING, Job
from broker.model.state import QueueState, key_entry_bytes

SEQ_BITS = 48  # 2.8e14 jobs
TIME_BITS = 48  # ms since the epoch: beyond the year 9999
SEQ_MASK = (1 << SEQ_BITS) - 1
TIME_MASK = (1 << TIME_BITS) - 1
_PRIORITY_SHIFT = SEQ_BITS + TIME_BITS
FENCE_BITS = 63  # a lease number: up to 2**62 (broker.model.format.decode's bound)
FENCE_MASK = (1 << FENCE_BITS) - 1


def ready_key(priority: int, run_at_ms: int, seq: int) -> int:
    """Ready-heap entry: smaller means claimed first (priority desc, run-at, seq)."""
    return ((MAX_PRIORITY - priority) << _PRIORITY_SHIFT) | (run_at_ms << SEQ_BITS) | seq


def timed_key(at_ms: int, seq: int) -> int:
    """Delayed-heap entry: (time, seq) in one int."""
    return (at_ms << SEQ_BITS) | seq


def key_seq(key: int) -> int:
    """The job seq of a ready- or delayed-heap entry."""
    return key & SEQ_MASK


def key_time(key: int) -> int:
    """The time (ms) of a ready- or delayed-heap entry."""
    return (key >> SEQ_BITS) & TIME_MASK


def lease_key(expires_ms: int, fence: int) -> int:
    """Lease-heap entry: (a claim record's expiry, its fence) in one int. Not
    :func:`timed_key`: a fence may need more bits than a seq has."""
    return (expires_ms << FENCE_BITS) | fence


def lease_fence(key: int) -> int:
    """The claim record's fence of a lease-heap entry."""
    return key & FENCE_MASK


def lease_time(key: int) -> int:
    """The expiry (ms) of a lease-heap entry."""
    return key >> FENCE_BITS


def schedule(state: QueueState, job: Job, now_ms: int) -> None:
    """Index a job that just became pending: ready if due at ``now_ms``, else delayed."""
    if job.run_at_ms <= now_ms:
        heapq.heappush(state.ready, ready_key(job.priority, job.run_at_ms, job.seq))
    else:
        heapq.heappush(state.delayed, timed_key(job.run_at_ms, job.seq))


def promote_due(state: QueueState, now_ms: int) -> None:
    """Move the delayed jobs due at ``now_ms`` to the ready heap."""
    delayed = state.delayed
    while delayed and key_time(delayed[0]) <= now_ms:
        entry = heapq.heappop(delayed)
        seq, run_at = key_seq(entry), key_time(entry)
        job = state.jobs.get(seq)
        if job is not None and job.status == PENDING and job.run_at_ms == run_at:
            heapq.heappush(state.ready, ready_key(job.priority, run_at, seq))


def compact_leases(state: QueueState) -> None:
    """Rebuild the lease heap from the claim records, dropping stale entries."""
    state.leases = _record_leases(state)


def _record_leases(state: QueueState) -> list[int]:
    """The lease heap of the state's claim records: one entry a record."""
    leases = [lease_key(r.expires_ms, r.fence) for r in state.claim_records.values()]
    heapq.heapify(leases)
    return leases


def rebuild_indexes(state: QueueState) -> None:
    """Recompute every derived index from the jobs: the heaps, the completed (and
    cancelled) jobs by commit, and the size estimates (the encoding cache is the codec's, see
    :func:`broker.model.format.codec.reset_blocks`)."""
    ready: list[int] = []
    delayed: list[int] = []
    completed: dict[int, list[int]] = {}
    approx = 0
    for job in state.jobs.values():
        approx += job.size_estimate()
        if job.status == PENDING:
            ready.append(ready_key(job.priority, job.run_at_ms, job.seq))
        elif job.status in FINISHED and job.done_seq is not None:
            completed.setdefault(job.done_seq, []).append(job.seq)
    heapq.heapify(ready)
    state.ready, state.delayed, state.leases = ready, delayed, _record_leases(state)
    state.completed = completed
    state.approx_bytes = approx + sum(  # (results of claim records' done entries)
        len(r or b"") + 8 for rec in state.claim_records.values()
        for e in rec.completions or () for r in e.results)
    state.key_bytes = sum(map(key_entry_bytes, state.keys)) + sum(
        map(key_entry_bytes, state.once))


def expired_leases(state: QueueState, now_ms: int) -> Iterator[Job]:
    """The claimed jobs whose claim's lease expired by ``now_ms``, popping their
    records' entries; a record's jobs in claim order.

    Lazy: each entry is checked against its record when reached (an old entry
    of a record since renewed or gone is skipped), and each job against the
    record, so a job the caller moves on is not yielded again by another entry
    of the same lease.
    """
    leases, jobs, records = state.leases, state.jobs, state.claim_records
    later: list[int] = []  # records with jobs held at segment parts not materialized
    while leases and lease_time(leases[0]) <= now_ms:
        entry = heapq.heappop(leases)
        fence, expires = lease_fence(entry), lease_time(entry)
        record = records.get(fence)
        if record is None or record.expires_ms != expires:
            continue  # an old entry: the claim settled or its lease was extended
        # (the caller settles; a job held at a segment part and not materialized,
        # see broker.model.held.materialize_expired, waits for a later batch)
        held = [jobs.get(record.seqs[pos]) for pos in record.unsettled()]
        if None in held:
            later.append(entry)
        for job in held:
            if job is not None and job.status == CLAIMED and job.claim == fence and \
                    job.lease_token is not None:
                yield job
    for entry in later:
        heapq.heappush(leases, entry)


def bound_stale_leases(state: QueueState) -> None:
    """Compact the lease heap once it outgrows the claim records twice over.

    Stale entries (settled claims, extended leases) wait for their time to
    come; compacting only then bounds them without walking the records on
    every commit.
    """
    if len(state.leases) > 64 + 2 * len(state.claim_records):
        compact_leases(state)
