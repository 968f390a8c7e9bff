"""Jobs that move from segment objects into the head: claims, purges, windows.

A segment's pending jobs are not in the queue object (see
:mod:`broker.model.segments`). The model is pure, so it never reads a segment:
the broker loads the lines a batch of claims may need *before* it applies the
batch (:func:`plan_windows` says which, :class:`SegmentWindows` holds them,
``QueueState.windows`` points at them), and a claim here only takes lines
already loaded. A claim whose next job in claim order lies in a segment with no
loaded line stops there and answers the jobs it has (never a job out of order).

Claim order is the queue's: :func:`claim_merged` asks
:func:`broker.model.segments.refs.next_from` where the next job comes from (the
inline ready heap or a segment), moves a run of a segment's jobs into the head
as pending (:func:`move_in`: the cursor ``taken`` advances, the reference is
dropped once exhausted) and lets :func:`broker.model.lifecycle.claim_ready`
claim them, so a claimed job is in the head exactly as if it had always been.
Segments never interleave with one another in claim order (each holds one
priority and due time over consecutive seqs, and their seq ranges are
disjoint), so a greedy walk in order of their next keys plans exactly.

A dropped reference (exhausted, or purged) goes to ``QueueState.dropped_refs``;
its object is deleted only once the commit without it has landed.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from broker.errors import InvalidRequest, PayloadTooLarge
from broker.model import receipts as R
from broker.model.claim_records import ClaimRecord
from broker.model.format import codec
from broker.model.format.segment_format import segment_job
from broker.model.format.spill_refs import SpillRef
from broker.model.held import held_by_seq, held_position, page_held
from broker.model.indexes import SEQ_MASK, lease_time, promote_due, ready_key, timed_key
from broker.model.job import (
    CLAIMED,
    COMPLETED,
    JOB_OVERHEAD_BYTES,
    PENDING,
    Job,
    JobIds,
    job_id_for,
    seq_of,
)
from broker.model.job_lines import pending_payload
from broker.model.lifecycle import (
    IllegalMove,
    claim_ready,
    close_claim,
    open_claim,
)
from broker.model.ops import (
    Claim,
    Complete,
    Fail,
    Heartbeat,
    Inspect,
    LeasedJobs,
    Op,
    ReadJobs,
    Reclaim,
    Release,
)
from broker.model.segments.grouped import claim_grouped, dissolve, grouped_refs, uses_groups
from broker.model.segments.refs import (
    INLINE,
    due_key,
    next_from,
    purge_segments,
    run_from,
    take,
    take_position,
    taken_between,
    untaken_spans,
)
from broker.model.spill_parts import Candidate, hold_spilled, spill_missing
from broker.model.state import MAX_WINDOWS, QueueState, SegmentRef, SegmentWindows, Span

__all__ = ["SegmentWindows", "attach_refs", "claim_merged", "claim_refs", "move_in",
           "move_in_position", "plan_windows", "purge_pending", "reserve"]


def claim_refs(state: QueueState, budget: int, now_ms: int) -> list[tuple[SegmentRef, int]]:
    """The segments a batch of claims of at most ``budget`` jobs in all may take
    from at ``now_ms``, with how many jobs of each from its cursor on: in claim
    order, at most :data:`MAX_WINDOWS` of them (all their windows must be held
    at once; a claim ends at a segment without one, the next batch goes on)."""
    if budget <= 0:
        return []  # (a batch without claims: nothing to sort)
    due = sorted((key, i) for i, ref in enumerate(state.segment_refs)
                 if (key := due_key(ref, now_ms)) is not None)
    out = []
    for _, i in due[:MAX_WINDOWS]:
        if budget <= 0:
            break
        ref = state.segment_refs[i]
        need = min(budget, ref.remaining)
        budget -= need
        out.append((ref, need))
    # (grouped segments are taken by group, not from a cursor: the ones a batch
    # may reach are planned by broker.model.segments.planning)
    return out


def plan_windows(windows: SegmentWindows | None,
                 claims: list[tuple[SegmentRef, int]]) -> list[tuple[SegmentRef, int]]:
    """Of ``claims`` (what :func:`claim_refs` answers for a batch), the segments
    whose loaded lines in ``windows`` fall short of what the batch may take from
    them, and how many lines of each from its cursor on to load: ``[(ref,
    want)]`` in claim order. The broker loads at least ``want`` lines of each
    before it applies the batch, keeping the windows of every one of ``claims``."""
    # the whole rest: a window is one read of the object, which is bounded
    # (MAX_SEGMENT_JOBS, broker.service.by_reference.SEGMENT_MAX_BYTES)
    return [(ref, ref.remaining) for ref, need in claims
            if windows is None or windows.loaded(ref) < need]


def page_refs(state: QueueState, after_seq: int, limit: int) -> list[SegmentRef]:
    """The segments a page of at most ``limit`` jobs after seq ``after_seq`` (in
    seq order, any status or pending) may show jobs of, in seq order."""
    out, budget = [], limit
    for ref in state.segment_refs:  # (in ascending first_seq)
        if budget <= 0:
            break
        start = max(ref.next_seq if ref.groups is None else ref.first_seq, after_seq + 1)
        end = ref.first_seq + ref.count
        if start < end:
            shown = end - start
            if ref.groups is not None:  # (its taken positions are not shown)
                shown -= taken_between(ref, start - ref.first_seq, ref.count)
            if shown > 0:
                out.append(ref)
                budget -= shown
    return out


def segment_page(state: QueueState, after_seq: int, limit: int) -> tuple[list[Job], int | None]:
    """The segments' pending jobs after seq ``after_seq`` that a page of ``limit``
    may show, as throwaway :class:`Job` objects in seq order, and the first seq
    whose line is not loaded (the page must end before it), or None."""
    jobs: list[Job] = []
    windows = state.windows
    for ref in page_refs(state, after_seq, limit):
        if ref.groups is not None:
            unloaded = _grouped_page(ref, windows, after_seq, limit, jobs)
            if unloaded is not None:
                return jobs, unloaded
            if len(jobs) >= limit:
                break
            continue
        start = max(ref.next_seq, after_seq + 1)
        want = min(limit - len(jobs), ref.first_seq + ref.count - start)
        lines = windows.peek(ref, start - ref.first_seq, want) \
            if windows is not None else None
        if lines is None:
            return jobs, start
        jobs += [segment_job(seq, line, ref) for seq, line in enumerate(lines, start)]
        if len(lines) < want:  # (a window that ends early: the rest is not loaded)
            return jobs, start + len(lines)
        if len(jobs) >= limit:
            break
    return jobs, None


def _grouped_page(ref: SegmentRef, windows: SegmentWindows | None, after_seq: int,
                  limit: int, jobs: list[Job]) -> int | None:
    """:func:`segment_page`'s part for grouped ``ref``: its untaken jobs after
    ``after_seq`` appended to ``jobs`` up to ``limit``; the first seq whose
    line is not loaded, or None."""
    first = ref.first_seq
    for lo, hi in untaken_spans(ref, max(0, after_seq + 1 - first)):
        want = min(limit - len(jobs), hi - lo)
        if want <= 0:
            return None
        lines = windows.peek(ref, lo, want) if windows is not None else None
        if lines is None:
            return first + lo
        jobs += [segment_job(seq, line, ref) for seq, line in enumerate(lines, first + lo)]
        if len(lines) < want:
            return first + lo + len(lines)
    return None


def _clean_top(state: QueueState, now_ms: int) -> int | None:
    """The inline ready heap's first live, due entry (stale ones popped, early
    ones moved to the delayed heap, as :func:`claim_ready` would), or None."""
    ready, entries = state.ready, state.jobs.entries
    while ready:
        entry = ready[0]
        seq = entry & SEQ_MASK
        job = entries.get(seq)
        if isinstance(job, bytes):
            return entry
        if job is None or job.status != PENDING or ready_key(
                job.priority, job.run_at_ms, seq) != entry:
            heapq.heappop(ready)
            continue
        if job.run_at_ms > now_ms:
            heapq.heappop(ready)
            heapq.heappush(state.delayed, timed_key(job.run_at_ms, seq))
            continue
        return entry
    return None


def move_in(state: QueueState, i: int, n: int) -> int:
    """Move up to ``n`` loaded jobs of segment ref ``i`` from its cursor on into
    the head as pending (ready-heap entries, encoding cache, size estimate),
    advance its cursor and drop it if exhausted. Returns how many moved (0 if
    none of them is loaded)."""
    refs, windows = state.segment_refs, state.windows
    ref = refs[i]
    lines = windows.take(ref, n) if windows is not None else []
    if not lines:
        return 0
    first, count = ref.next_seq, len(lines)
    probe = segment_job(first, lines[0], ref)
    overhead = len(lines[0]) - len(probe.payload) - len(str(first))
    jobs = state.jobs
    if ref.priority == 0 and probe.created_ms == ref.run_at_ms:
        jobs.insert_lines(first, lines)  # (what a bulk push's lines look like)
    else:
        for seq, line in enumerate(lines, first):
            jobs.insert(seq, segment_job(seq, line, ref))
    codec.inserted_many(state, first, count)
    base = ready_key(ref.priority, ref.run_at_ms, 0)
    ready = state.ready
    for seq in range(first, first + count):
        heapq.heappush(ready, base + seq)
    payload_bytes = sum(map(len, lines)) - count * overhead - sum(
        len(str(seq)) for seq in range(first, first + count))
    state.approx_bytes += payload_bytes + JOB_OVERHEAD_BYTES * count
    taken = take(refs, i, count)
    if taken.exhausted and taken.key not in state.seg_names:  # (named: its held jobs' lines)
        del refs[i]
        state.dropped_refs.append(taken)
    else:
        refs[i] = taken
    return count


def move_in_position(state: QueueState, i: int, pos: int) -> Job | None:
    """Move the job at position ``pos`` of grouped segment ref ``i`` (untaken)
    into the head as pending, its position added to the ref's ``taken_at`` (the
    grouped twin of :func:`move_in`); the ref is dropped once exhausted. The
    job, or None if its line is not loaded (nothing changed)."""
    refs, windows = state.segment_refs, state.windows
    ref = refs[i]
    line = windows.line_at(ref, pos) if windows is not None else None
    if line is None:
        return None
    seq = ref.first_seq + pos
    job = segment_job(seq, line, ref)
    state.jobs.insert(seq, job)
    codec.inserted_many(state, seq, 1)
    state.approx_bytes += job.size_estimate()
    if job.group is not None:
        heapq.heappush(state.grouped, seq)  # (the head is written as version 6)
    taken = take_position(ref, pos)
    if taken.exhausted and taken.key not in state.seg_names:  # (named: see move_in)
        del refs[i]
        state.dropped_refs.append(taken)
    else:
        refs[i] = taken
    return job


def hold_in(state: QueueState, i: int, n: int, record: ClaimRecord,
            tag: Callable[[str], str], out: LeasedJobs) -> int:
    """Claim up to ``n`` loaded jobs of (ungrouped) segment ref ``i`` from its
    cursor on into ``record`` as a segment part (design 1.2): no line enters the
    head, the cursor advances (the ref stays while a record names it), the
    lines go to the held-jobs cache and the jobs are answered in ``out``.
    Returns how many (0 if none of them is loaded)."""
    refs, windows = state.segment_refs, state.windows
    ref = refs[i]
    lines = windows.take(ref, n) if windows is not None else []
    if not lines:
        return 0
    count, first = len(lines), ref.next_seq
    counters = state.counters
    pos0 = len(record.seqs)
    if record.fence + pos0 != counters.fence + 1:
        raise IllegalMove(f"claim record {record.fence} is not the last claim")
    span = (pos0, count, ref.key, ref.taken)
    if record.add_seg(*span):
        state.seg_names[ref.key] = state.seg_names.get(ref.key, 0) + 1
    record.seqs.extend(range(first, first + count))
    record._pos = None
    state.held.put(record.fence, span, ref, lines)
    refs[i] = take(refs, i, count)  # (named by the record: never dropped here)
    ids, payloads, tokens, attempts, expiries = out.columns
    expires, fence = record.expires_ms, record.fence + pos0
    # (no Job per line: an id, the payload's bytes and the first attempt are all
    # a claim answers, and a segment's line is pending, never attempted)
    for k, line in enumerate(lines):
        job_id = job_id_for(first + k)
        ids.append(job_id)
        payloads.append(pending_payload(line))
        tokens.append(tag(f"{job_id}.{fence + k}"))
    attempts += [1] * count
    expiries += [expires] * count
    counters.fence += count
    return count


#: At most this many jobs held at records' segment parts are loaded by one batch
#: for a reclaim (with the lines of the claims the batch's ops name): a fleet of
#: workers gone at once is reclaimed over a few commits, in bounded memory.
RECLAIM_HELD_JOBS = 20_000


def held_loads(state: QueueState, ops: Sequence[Op],
               ahead_ms: int) -> list[tuple[SegmentRef, int, Span]]:
    """The jobs held at records' segment parts that a batch of ``ops`` may
    materialize and whose lines the held-jobs cache lacks (design 3.3), of the
    records :func:`held_wanted` names. As ``(ref, fence, span)``: record
    ``fence``'s segment part ``span`` (positions ``span[3] ..`` of ``ref``'s
    segment). The broker reads them before the batch applies."""
    return held_missing(state, held_wanted(state, ops, ahead_ms))


def held_spill_loads(state: QueueState, ops: Sequence[Op],
                     ahead_ms: int) -> list[tuple[SpillRef, int, Span]]:
    """:func:`held_loads`' twin for spill parts: ``(ref, fence, span)`` of the
    records' spill parts a batch of ``ops`` may materialize or show whose jobs
    the held-jobs cache lacks (:func:`broker.model.spill_parts.spill_missing`)."""
    return spill_missing(state, held_wanted(state, ops, ahead_ms))


def held_wanted(state: QueueState, ops: Sequence[Op],
                ahead_ms: int) -> dict[int, ClaimRecord]:
    """The claim records, by fence, with jobs held at segment parts that a batch
    of ``ops`` may materialize: those of the tokens of completes, fails and
    releases, of heartbeats' marked ones, of the records whose lease runs out by
    ``ahead_ms`` (a reclaim) and of a claim's repeat. The broker pins every one
    in the held-jobs cache for the batch, loaded already or not: a line loaded
    for one must never push out another's the same batch settles."""
    if not state.seg_names:
        return {}
    records = state.claim_records
    fences = list(records)
    wanted: dict[int, ClaimRecord] = {}
    last: list[ClaimRecord] = []  # the record the last token found, wanted already

    def by_token(wire: str, marked_only: bool = False) -> None:
        token = wire.partition("-")[0]
        if last:
            # (a claim's tokens come back together: one whose fence the record
            # found last spans adds that record or nothing, so it is not looked up)
            record = last[0]
            fence = token[token.rfind(".") + 1:]
            if fence.isascii() and fence.isdigit() and \
                    record.fence <= int(fence) < record.fence + record.n:
                return
        found = held_position(state, token, fences)
        if found is not None and (not marked_only or found[1] in found[0].cancel):
            wanted[found[0].fence] = found[0]
            last[:] = [found[0]]

    for op in ops:
        if isinstance(op, Complete):
            for item in op.items:
                by_token(item[0])
        elif isinstance(op, Fail):
            for fail in op.items:
                by_token(fail.token)
        elif isinstance(op, Release):
            for wire in op.tokens:
                by_token(wire)
        elif isinstance(op, Heartbeat):
            for wire in op.tokens:
                by_token(wire, marked_only=True)
        elif isinstance(op, Reclaim):
            leases = state.leases  # (every batch reclaims: a walk only once one runs out)
            if leases and lease_time(leases[0]) <= ahead_ms:
                wanted.update(_reclaimed_first(records.values(), ahead_ms))
        elif isinstance(op, ReadJobs) and op.status in (None, CLAIMED, COMPLETED):
            page = page_held(state, seq_of(op.after or "") or 0, op.limit, op.status)
            wanted.update((r.fence, r) for _, r, _, _ in page)
        elif isinstance(op, Inspect) and op.view in ("job", "find", "lookup") and op.args:
            seq = seq_of(str(op.args[-1]))
            found = None if seq is None else held_by_seq(state, seq, done=True)
            if found is not None:
                wanted[found[0].fence] = found[0]
        elif isinstance(op, Claim) and op.request is not None:
            answered = state.receipts.answered(op.request, R.CLAIM)
            if answered:
                first, end = answered[0], answered[0] + answered[1]
                wanted.update((r.fence, r) for r in records.values()
                              if (r.segs or r.spills) and r.fence < end
                              and first < r.fence + r.n)
    return wanted


def _reclaimed_first(records: Iterable[ClaimRecord],
                     ahead_ms: int) -> list[tuple[int, ClaimRecord]]:
    """``(fence, record)`` of the records with jobs still held at segment parts
    whose lease runs out by ``ahead_ms``, soonest first, as many as hold at most
    :data:`RECLAIM_HELD_JOBS` such jobs together (at least one): a batch loads
    no more lines than that for a reclaim (the rest are reclaimed by the next
    batches: their lease entries stay due)."""
    due = sorted((r for r in records if (r.segs or r.spills) and r.expires_ms <= ahead_ms
                  and not r.done),
                 key=lambda r: r.expires_ms)
    out: list[tuple[int, ClaimRecord]] = []
    total = 0
    for record in due:
        total += record.held_seg()
        if out and total > RECLAIM_HELD_JOBS:
            break
        out.append((record.fence, record))
    return out


def held_missing(state: QueueState,
                 wanted: dict[int, ClaimRecord]) -> list[tuple[SegmentRef, int, Span]]:
    """The segment parts of the records ``wanted`` whose lines the held-jobs
    cache lacks, as :func:`held_loads` gives them."""
    refs = {ref.key: ref for ref in state.segment_refs}
    held = state.held
    out = []
    for fence, record in wanted.items():
        for span in record.segs or ():
            ref = refs.get(span[2])
            if ref is not None and not held.has(fence, span):
                out.append((ref, fence, span))
    return out


def claim_merged(state: QueueState, worker: str, max_jobs: int, lease_ms: int,
                 now_ms: int, tag: Callable[[str], str],
                 spilled: list[Candidate] | None = None) -> LeasedJobs:
    """:func:`broker.model.lifecycle.claim_ready` over the inline jobs and the
    segments' loaded lines together, in claim order (see the module docstring);
    by groups (limits, fair turns) while the queue uses them
    (:mod:`broker.model.segments.grouped`). ``spilled``: the due jobs of pending
    spill refs a claim may take, in claim order
    (:func:`broker.model.spill_parts.candidates`), merged in and held at the
    record's spill parts (:func:`broker.model.spill_parts.hold_spilled`)."""
    if state.settings.groups or state.grouped or state.groups is not None or (
            state.segment_refs and grouped_refs(state)):
        if uses_groups(state):
            return claim_grouped(state, worker, max_jobs, lease_ms, now_ms, tag, move_in,
                                 move_in_position)
        dissolve(state)
    if not state.segment_refs and not spilled:
        return claim_ready(state, worker, max_jobs, lease_ms, now_ms, tag)
    out = LeasedJobs()
    record = open_claim(state, worker, lease_ms, now_ms)  # (one claim, one record)
    spilled = spilled or []
    at = 0  # (the next of ``spilled``)
    while len(out) < max_jobs:
        promote_due(state, now_ms)
        top = _clean_top(state, now_ms)
        refs = state.segment_refs
        source = next_from(top, refs, now_ms)
        spill_key = spilled[at][0] if at < len(spilled) else None
        source_key = None if source is None else top if source == INLINE else \
            due_key(refs[source], now_ms)
        left = max_jobs - len(out)
        if spill_key is not None and (source_key is None or spill_key < source_key):
            end = at
            while end < len(spilled) and end - at < left and (
                    source_key is None or spilled[end][0] < source_key):
                end += 1
            hold_spilled(state, spilled[at:end], record, tag, out.columns)
            at = end
            continue
        if source is None:
            break
        if source == INLINE:
            until = min((k for ref in refs if (k := due_key(ref, now_ms)) is not None),
                        default=None)
            if spill_key is not None and (until is None or spill_key < until):
                until = spill_key
            got = claim_ready(state, worker, left, lease_ms, now_ms, tag, until, record)
        else:
            run = run_from(top, refs, source, now_ms)
            if spill_key is not None and source_key is not None:
                run = min(run, spill_key - source_key)  # (a segment's keys are consecutive)
            if state.held_in_records:
                if not hold_in(state, source, min(left, run), record, tag, out):
                    break  # (its lines are not loaded: answer what this claim has)
                continue
            moved = move_in(state, source, min(left, run))
            if not moved:
                break  # (its lines are not loaded: answer what this claim has)
            got = claim_ready(state, worker, moved, lease_ms, now_ms, tag, None, record)
        if not got:
            break
        for column, more in zip(out.columns, got.columns, strict=True):
            column.extend(more)
    close_claim(state, record)
    return out


def purge_pending(state: QueueState) -> int:
    """Drop every segment reference (a purge of pending jobs); return how many
    pending jobs went with them. Their objects are deleted once the commit
    without them has landed."""
    dropped, count = purge_segments(state.segment_refs)
    named = state.seg_names  # (a ref a claim record names stays, exhausted: its jobs are held)
    state.segment_refs = [replace(ref, taken=ref.count) for ref in dropped if ref.key in named]
    state.dropped_refs.extend(ref for ref in dropped if ref.key not in named)
    return count


def reserve(state: QueueState, count: int, largest: int) -> JobIds:
    """Hand out ``count`` seqs for a push by reference whose largest payload is
    ``largest`` bytes: ``PayloadTooLarge`` as a push of it would be, else the
    seqs (nothing else ever gets them: the counter only grows)."""
    limit = state.settings.max_payload_bytes
    if largest > limit:
        raise PayloadTooLarge(f"payload is {largest} bytes; this queue's limit is {limit} bytes")
    if not 1 <= count <= SEQ_MASK - state.counters.enqueued:
        raise InvalidRequest(f"cannot reserve {count} seqs")
    first = state.counters.enqueued + 1
    state.counters.enqueued += count
    state.counters.reserved += count
    return JobIds(first, count)


def attach_refs(state: QueueState, refs: Sequence[SegmentRef], *,
                check_only: bool = False) -> list[int]:
    """Reference the segments ``refs`` (written over seqs that :func:`reserve`
    handed out; none taken yet): their jobs become pending. Returns their seqs
    as runs (first seq, count, ...). ``InvalidRequest`` (nothing changed) if one
    lies beyond the seqs handed out or overlaps another, a reference or a job
    of the head: the object would not load again. ``check_only``: only that."""
    new = sorted(refs, key=lambda ref: ref.first_seq)
    for ref, after in itertools.pairwise(new):
        if ref.first_seq + ref.count > after.first_seq:
            raise InvalidRequest(f"segments over seq {after.first_seq} overlap")
    existing, entries = state.segment_refs, state.jobs.entries
    starts = [r.first_seq for r in existing]
    for ref in new:
        first, stop = ref.first_seq, ref.first_seq + ref.count
        if ref.taken or stop - 1 > state.counters.enqueued:
            raise InvalidRequest(f"segment over seqs {first}..{stop - 1} is taken or "
                                 "beyond the seqs handed out")
        at = bisect.bisect_left(starts, first)
        if (at and existing[at - 1].first_seq + existing[at - 1].count > first) or (
                at < len(existing) and existing[at].first_seq < stop):
            raise InvalidRequest(f"segment over seqs {first}..{stop - 1} overlaps another")
        if (any(first <= seq < stop for seq in entries) if len(entries) < stop - first
                else any(seq in entries for seq in range(first, stop))):
            raise InvalidRequest(f"seqs {first}..{stop - 1} are taken by jobs of the head")
    if check_only:
        return []
    counters = state.counters
    counters.reserved = max(0, counters.reserved - sum(ref.count for ref in new))
    runs: list[int] = []
    for ref in new:
        bisect.insort(existing, ref, key=lambda r: r.first_seq)
        if runs and runs[-2] + runs[-1] == ref.first_seq:
            runs[-1] += ref.count
        else:
            runs += (ref.first_seq, ref.count)
    return runs
