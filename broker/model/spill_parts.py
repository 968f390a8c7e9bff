"""Claims that hold spilled jobs at a claim record's spill part.

A claim whose next jobs in claim order lie in a due pending spill ref (jobs
waiting for their retry, or a redriven dead object) takes them without a line
in the head: the record gets a spill part (``{"spill": key, "at": runs, "seq":
runs}``, see :mod:`broker.model.claim_records`), the ref's cursor advances, and
the jobs as the ref shows them (payload, attempts, errors, key, priority,
times) go to the held-jobs cache (``HeldJobs.put_spilled``). A ref stays while
a record names it (``QueueState.seg_names`` counts the records naming each
segment or spill object), exhausted or not; its object with it.

A settlement of such a job (complete, fail, release, cancel end, reclaim)
first *materializes* it (:func:`broker.model.held.materialize`): a claimed
line of its own built from :func:`spill_view` (attempts the spilled ones + 1,
its error history kept), which the op then settles as any inline claimed job.

Pure: the broker loads the spill objects first (the claim's from
:func:`due_refs`, a settlement's from :func:`spill_missing`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from broker.model.claim_records import ClaimRecord, as_held, held_slices
from broker.model.format.spill_format import SpilledJob
from broker.model.format.spill_refs import SpillRef, claim_key, is_out
from broker.model.indexes import ready_key
from broker.model.job import PENDING, Job, job_id_for
from broker.model.state import MAX_WINDOWS, QueueState, Span

#: A claim candidate from a spill ref: (claim key, position in the object, the
#: ref's key, the job as the ref shows it).
Candidate = tuple[int, int, str, SpilledJob]


def window_name(ref: SpillRef) -> tuple[str, str]:
    """The name of ``ref``'s loaded jobs in ``state.spill_windows``: its key and
    etag, and for a redriven ref its reset time too (its jobs are loaded as it
    shows them: pending, attempts 0, due then)."""
    return (ref.key, ref.etag if ref.reset_ms is None else f"{ref.etag} {ref.reset_ms}")


def loaded(state: QueueState, ref: SpillRef) -> list[SpilledJob] | None:
    """``ref``'s jobs if the broker loaded them for this batch, else None."""
    jobs = state.spill_windows.get(window_name(ref))
    return jobs if jobs is not None and len(jobs) == ref.count else None


def shown(ref: SpillRef, jobs: list[SpilledJob]) -> Iterator[tuple[int, SpilledJob]]:
    """The (position, job) pairs ``ref`` still holds: a dead ref's all, a
    pending ref's from its cursor on, less those taken out."""
    lo = ref.taken if ref.kind == PENDING else 0
    return ((pos, jobs[pos]) for pos in range(lo, ref.count) if not is_out(ref, pos))


def pending_refs(state: QueueState) -> list[SpillRef]:
    """The head's pending spill refs."""
    return [ref for ref in state.spill_refs if isinstance(ref, SpillRef) and ref.kind == PENDING]


def due_refs(state: QueueState, now_ms: int) -> list[SpillRef]:
    """The pending spill refs due at ``now_ms``, in claim order of their next
    jobs, at most :data:`~broker.model.state.MAX_WINDOWS`: whose jobs the
    broker loads before a batch of claims."""
    due = [(key, i, ref) for i, ref in enumerate(pending_refs(state))
           if ref.next is not None and ref.next[0] <= now_ms
           and (key := claim_key(ref)) is not None]
    return [ref for _, _, ref in sorted(due)[:MAX_WINDOWS]]


def advanced(ref: SpillRef, taken: int, jobs: list[SpilledJob]) -> SpillRef:
    """Pending ``ref`` with its cursor at ``taken``: ``next``, ``priority`` and
    ``due_min`` its cursor line's (None once every job is taken)."""
    while taken < ref.count and is_out(ref, taken):
        taken += 1
    if taken >= ref.count:
        return replace(ref, taken=ref.count, next=None, due_min=None)
    line = jobs[taken]  # (the earliest due of the rest: lines are by run-at)
    return replace(ref, taken=taken, priority=line.priority,
                   next=(line.run_at_ms, line.seq), due_min=line.run_at_ms)


def _keyed(ref: SpillRef, jobs: list[SpilledJob], now_ms: int) -> Iterator[Candidate]:
    """``ref``'s jobs from its cursor on as candidates, up to the first not due
    at ``now_ms`` (a pending object's lines are by run-at: none after it is
    due either)."""
    for pos, job in shown(ref, jobs):
        if job.run_at_ms > now_ms:
            return
        yield ready_key(job.priority, job.run_at_ms, job.seq), pos, ref.key, job


def candidates(state: QueueState, budget: int, now_ms: int) -> list[Candidate]:
    """The best ``budget`` due jobs of the loaded due pending spill refs, in
    claim order (what a claim of ``budget`` may take from them)."""
    streams = []
    for ref in due_refs(state, now_ms):
        jobs = loaded(state, ref)
        if jobs is not None:
            streams.append(_keyed(ref, jobs, now_ms))
    if not streams or budget <= 0:
        return []
    out: list[Candidate] = []
    for item in heapq.merge(*streams, key=lambda item: item[:3]):
        if len(out) >= budget:
            break
        out.append(item)
    return out


def hold_spilled(state: QueueState, items: list[Candidate], record: ClaimRecord,
                 tag: Callable[[str], str], columns: tuple[list[Any], ...]) -> None:
    """Claim the candidates ``items`` (in claim order, each a due job at its
    ref's cursor or after one taken before it in ``items``) into ``record`` as
    spill parts: no line enters the head, each ref's cursor advances past what
    it gave (the ref stays while a record names it), the jobs go to the
    held-jobs cache and are answered in ``columns`` (ids, payloads, tokens,
    attempts, expiries)."""
    counters = state.counters
    pos0 = len(record.seqs)
    if record.fence + pos0 != counters.fence + 1:
        raise ValueError(f"claim record {record.fence} is not the last claim")
    refs = {ref.key: (i, ref) for i, ref in enumerate(state.spill_refs)
            if isinstance(ref, SpillRef)}
    ids, payloads, tokens, attempts, expiries = columns
    expires = record.expires_ms
    run: list[SpilledJob] = []
    run_key, run_at = "", -1
    upto: dict[str, int] = {}

    def close() -> None:
        nonlocal pos0
        if not run:
            return
        span = (pos0, len(run), run_key, run_at)
        if record.add_spill(*span):
            state.seg_names[run_key] = state.seg_names.get(run_key, 0) + 1
        state.held.put_spilled(record.fence, span, refs[run_key][1], run)
        pos0 += len(run)
        run.clear()

    for _, pos, key, job in items:
        if run and (key != run_key or run_at + len(run) != pos):
            close()
        if not run:
            run_key, run_at = key, pos
        run.append(job)
        upto[key] = pos + 1
        record.seqs.append(job.seq)
        counters.fence += 1
        job_id = job_id_for(job.seq)
        ids.append(job_id)
        payloads.append(job.payload)
        tokens.append(tag(f"{job_id}.{counters.fence}"))
        attempts.append(job.attempts + 1)
        expiries.append(expires)
    close()
    record._pos = None
    for key, taken in upto.items():
        i, ref = refs[key]
        state.spill_refs[i] = advanced(ref, taken, loaded(state, ref) or [])


def spill_view(state: QueueState, record: ClaimRecord, pos: int,
               span: Span | None = None) -> Job | None:
    """The claimed job held at spill-part position ``pos`` of ``record`` as a
    throwaway :class:`Job` reading its lease through the record
    (:func:`claimed_job`), or None if its job is not loaded."""
    span = span or record.spill_span(pos)
    got = None if span is None else state.held.spilled_job(record.fence, span, pos - span[0])
    return None if got is None else claimed_job(record, pos, got)


def claimed_job(record: ClaimRecord, pos: int, spilled: SpilledJob) -> Job:
    """The job held at spill-part position ``pos`` of ``record``, ``spilled`` as
    its ref shows it, as a claimed :class:`Job` reading its lease through the
    record: attempts the spilled ones + 1, its error history kept."""
    return as_held(spilled.to_job(PENDING), record, pos)


def spill_slices(state: QueueState,
                 ref: SpillRef) -> tuple[tuple[int, ClaimRecord, int], ...]:
    """``(position in ref's object, record, position in the record)`` of each
    job a claim record of ``state`` holds at a spill part of ``ref`` (not
    settled) or names in a done entry, by object position: for the readers of
    whole spill objects (the Spark reader shows them claimed, or completed
    awaiting their archive object: :func:`broker.model.held.spill_job_at`)."""
    if ref.key not in state.seg_names:
        return ()
    return held_slices(state.claim_records.values(), ref.key, lambda record: record.spills)


def spill_missing(state: QueueState,
                  wanted: dict[int, ClaimRecord]) -> list[tuple[SpillRef, int, Span]]:
    """The spill parts of the records ``wanted`` whose jobs the held-jobs cache
    lacks, as ``(ref, fence, span)``: the broker reads ``ref``'s object and
    keeps positions ``span[3] ..`` (``span[1]`` of them) before the batch."""
    refs = {ref.key: ref for ref in state.spill_refs if isinstance(ref, SpillRef)}
    held = state.held
    out = []
    for fence, record in wanted.items():
        for span in record.spills or ():
            ref = refs.get(span[2])
            if ref is not None and not held.has_spilled(fence, span):
                out.append((ref, fence, span))
    return out


def unname_spill(state: QueueState, key: str) -> None:
    """No record names spill object ``key`` any more: its ref, if pending and
    every job taken, is dropped (its object deleted once the commit without it
    landed)."""
    refs = state.spill_refs
    for i, ref in enumerate(refs):
        if ref.key == key:
            if isinstance(ref, SpillRef) and ref.kind == PENDING and not ref.live:
                del refs[i]
                state.dropped_refs.append(ref)
            break
