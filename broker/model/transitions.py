"""Every queue operation as ``apply(state, op, now_ms) -> result``.

No I/O and no clock: time comes in as ``now_ms`` (integer milliseconds). An
operation either applies whole or raises an :class:`~broker.errors.OsqueueError`
before changing anything, so a bad request in a group commit never leaves a
half-applied state. ``apply`` mutates ``state`` in place (copying a queue of a
million jobs per commit would cost more than the write); a caller that must
roll back re-reads the committed object instead.

Promises kept here (and checked by the property tests):

* claim order: runnable pending jobs by priority (higher first), then run-at,
  then enqueue sequence; paused queues hand out nothing;
* ``attempts`` counts claims (less those released unheard); a job is claimed
  only while ``attempts < max_attempts``; a failure or an expired lease on the
  last attempt makes it ``dead``;
* a fencing token is valid only while its job is claimed under it and its
  lease has not expired at ``now_ms``; a stale token never completes,
  fails or extends a job; a token whose tag does not verify (another queue's,
  a guessed one: see :mod:`broker.model.tokens`) is refused before its job is
  looked up; an untagged one only while its lease predates the queue's key
  (``untagged_fences``, see :func:`broker.model.tokens.checker`);
* a push whose idempotency key is in the window returns the original id and
  creates nothing;
* a repeated call answers as the first did while its receipt is kept (see
  :mod:`broker.model.receipts`): a push with the same request key gets the same ids,
  a claim with the same request key the same jobs (those still held), a
  complete or fail of a token it already settled the same answer;
* a completed job stays, status ``completed`` with its result, until
  :class:`DropArchived` removes it once its archive object is written; so
  does a cancelled one;
* a job marked for cancellation ends cancelled, never completed, pending or
  dead: every call of its token and the end of its lease end it so (see
  :mod:`broker.model.cancels`);
* a claim takes no more jobs than the dispatch rate limit's tokens allow
  (see :mod:`broker.model.ratelimit`).

The rules live here; the operations and results are plain values in
:mod:`broker.model.ops`. Every change of a job's status goes through
:mod:`broker.model.lifecycle`, which checks it against the table of allowed moves and
keeps the heaps (:mod:`broker.model.indexes`) and the encoding (:mod:`broker.model.format.codec`)
in step; nothing here knows how either is laid out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, cast

from broker.errors import InvalidRequest, PayloadTooLarge, QueueFull, shown
from broker.limits import (
    MAX_CLAIM_JOBS,
    MAX_DELAY_MS,
    MAX_LEASE_MS,
    MAX_WORKER_CHARS,
)
from broker.model import browse, cancels, idempotency, lifecycle, queue_rules, tokens
from broker.model import receipts as R
from broker.model.claim_records import ClaimRecord
from broker.model.columns import Columns, plain_rows
from broker.model.held import (
    complete_position,
    done_at,
    drop_done,
    held_position,
    materialize,
    materialize_expired,
    materialize_live,
    purge_held,
    still_held,
)
from broker.model.indexes import bound_stale_leases, expired_leases, promote_due
from broker.model.inserts import insert_jobs, insert_payloads
from broker.model.job import (
    CLAIMED,
    COMPLETED,
    DEAD,
    PENDING,
    Job,
    JobIdRuns,
    JobIds,
    errors_bytes,
    job_id_for,
    seq_of,
    with_error,
)
from broker.model.lifecycle import (
    GONE,
    claim_of,
    complete_held,
    extend_claim,
    live_job,
    move,
)
from broker.model.ops import (
    Cancel,
    Claim,
    ClearBroker,
    Complete,
    Configure,
    DropArchived,
    Fail,
    Heartbeat,
    Inspect,
    LeasedJob,
    LeasedJobs,
    Op,
    Purge,
    Push,
    PushPayloads,
    ReadJobs,
    ReadStats,
    Reclaim,
    Redrive,
    Release,
    RenewBroker,
    Reserve,
    Result,
    SetPaused,
    TakeOver,
    groups_of,
)
from broker.model.segments.claims import attach_refs, claim_merged, purge_pending, reserve
from broker.model.segments.grouped import take_pushed, uses_groups
from broker.model.spill_parts import candidates
from broker.model.spills import move_in, purge_spilled, redrive_spilled
from broker.model.state import QueueSettings, QueueState
from broker.wire import ItemResult

__all__ = ["apply", "backoff_ms", "new_state"]

# -- helpers -------------------------------------------------------------------


def backoff_ms(settings: QueueSettings, attempts: int) -> int:
    """Delay before retry number ``attempts`` (1-based): base * 2**(attempts-1), capped."""
    delay = settings.backoff_base_s * (2 ** max(0, attempts - 1))
    return round(min(delay, settings.backoff_max_s) * 1000)


def _settle_failure(state: QueueState, job: Job, error: str, retry_in_ms: int | None,
                    now_ms: int) -> str:
    """Move a claimed job back to pending (retry) or dead; return the new status.
    Its error history gains an entry: this attempt (``job.attempts``, at least
    1), failed at ``now_ms``, ``error`` cut to its last MAX_ERROR_CHARS
    characters (``""`` if it gave none: ``last_error`` is then None). A
    reclaim's expired lease is such a failure too (its text says so): it uses
    up an attempt, as it always set ``last_error``."""
    job.lease = None
    before = job.errors
    job.errors = with_error(before, max(1, job.attempts), now_ms, error or "")
    # (the history is part of the job's size estimate, which the state keeps)
    state.approx_bytes += errors_bytes(job.errors) - errors_bytes(before)
    state.counters.failed += 1
    if job.attempts >= job.max_attempts:
        state.counters.dead += 1
        move(state, job, DEAD, now_ms)
    else:
        delay = retry_in_ms if retry_in_ms is not None else backoff_ms(state.settings, job.attempts)
        job.run_at_ms = now_ms + max(0, delay)
        move(state, job, PENDING, now_ms)
    return job.status


# -- operation handlers -----------------------------------------------------------


def _ids_of(seqs: list[int]) -> Sequence[str]:
    if seqs and seqs[-1] - seqs[0] == len(seqs) - 1 and seqs == list(
            range(seqs[0], seqs[-1] + 1)):
        return JobIds(seqs[0], len(seqs))
    return [job_id_for(seq) for seq in seqs]


def _push(state: QueueState, op: Push | PushPayloads, now_ms: int) -> Result:
    earlier = idempotency.earlier(state, op.request, op.floor, R.PUSH, now_ms, op.digest)
    if earlier is not None:
        if not earlier:  # the first attempt was refused (and that is written): so is this
            return Result(replayed=True, error=QueueFull(
                "queue full: this push was refused before (a repeat of it); "
                "nothing from it was written"))
        return Result(ids=_ids_of(list(R.expand(earlier))), replayed=True)
    if op.once is not None and idempotency.published(state, op.once, now_ms):
        return Result(duplicate=True)
    if op.missing:
        raise InvalidRequest(f"{op.missing} staged chunk(s) of this write are missing; "
                             "nothing was published")
    ids: Sequence[str]
    if op.refs:  # (before anything changes)
        attach_refs(state, op.refs, check_only=True)
    try:
        if isinstance(op, PushPayloads):
            ids = insert_payloads(state, op.payloads, now_ms)
        else:
            was_ready = bool(state.ready)
            ids = insert_jobs(state, op.jobs, now_ms)
            if state.groups is not None and not was_ready and not op.refs \
                    and isinstance(ids, JobIds):
                take_pushed(state, [new.group for new in op.jobs], now_ms)  # (a bulk push)
        if op.refs:  # (their segments are written already: see Reserve)
            ids = _with_refs(attach_refs(state, op.refs), ids)
    except QueueFull as exc:
        if op.request is None:
            raise
        # Refused for the state the queue is in, which changes: remember it, written
        # before the caller hears of it (the write also fences out any earlier attempt
        # of this call), so a late copy is refused too, not applied once there is room.
        state.receipts.record(op.request, R.PUSH, [], now_ms, op.digest)
        idempotency.trim(state, now_ms)
        return Result(changed=True, error=exc)
    if op.once is not None:
        idempotency.remember_published(state, op.once, now_ms)
    if op.request is not None:
        runs = ([ids.first, len(ids)] if isinstance(ids, JobIds) else ids.runs
                if isinstance(ids, JobIdRuns) else R.runs_of(seq_of(i) or 0 for i in ids))
        state.receipts.record(op.request, R.PUSH, runs, now_ms, op.digest)
    idempotency.trim(state, now_ms)
    return Result(changed=True, ids=ids)


def _with_refs(runs: list[int], inline: Sequence[str]) -> Sequence[str]:
    """The ids of a push: the segments' seqs (``runs``), then the inline jobs'."""
    if inline:
        runs = runs + ([inline.first, len(inline)] if isinstance(inline, JobIds)
                       else R.runs_of(seq_of(i) or 0 for i in inline))
    return JobIds(runs[0], runs[1]) if len(runs) == 2 else JobIdRuns(runs)


def _check_lease(lease_ms: int) -> None:
    if not 0 < lease_ms <= MAX_LEASE_MS:
        raise InvalidRequest(f"lease must be within (0, {MAX_LEASE_MS // 1000}] s, "
                             f"got {lease_ms / 1000}")


def _claim(state: QueueState, op: Claim, now_ms: int) -> Result:
    if not 1 <= op.max_jobs <= MAX_CLAIM_JOBS:
        raise InvalidRequest(f"max_jobs must be 1..{MAX_CLAIM_JOBS}, got {op.max_jobs}")
    _check_lease(op.lease_ms)
    if not op.worker or len(op.worker) > MAX_WORKER_CHARS:
        raise InvalidRequest(f"worker must be a name of 1..{MAX_WORKER_CHARS} characters")
    earlier = idempotency.earlier(state, op.request, op.floor, R.CLAIM, now_ms)
    if earlier is not None:
        held = still_held(state, earlier[0], earlier[1], now_ms)
        receipt = state.receipts.requests.get(op.request or "")
        if held and receipt is not None:  # this repeat holds them now: see _release
            receipt.replayed = True
        if state.grouped and held:
            return Result(jobs=_named_groups(state, LeasedJobs.of(held)), replayed=True)
        return Result(jobs=held, replayed=True)
    result = Result()
    if state.paused:
        return result
    tag = tokens.tagger(state).tag  # (raises before anything changed)
    first_fence = state.counters.fence + 1
    want = state.claims.cap(state.settings, op.max_jobs, now_ms)  # the dispatch rate limit
    # (jobs of pending spill objects: held at the claim's record's spill parts, in
    # claim order among the head's and the segments'; where claims go by groups,
    # moved into the head first, the best of them, as pending lines)
    spilled, moved = None, False
    if state.spill_refs:
        if state.held_in_records and not uses_groups(state):
            spilled = candidates(state, want, now_ms)
        else:
            moved = move_in(state, want, now_ms)
    out = result.jobs = claim_merged(state, op.worker, want, op.lease_ms, now_ms, tag, spilled)
    if state.grouped and out and not groups_of(out):  # (a grouped claim names its own)
        _named_groups(state, out)
    state.claims.spend(state.settings, len(out), now_ms)
    result.changed = bool(out) or moved
    if out and op.request is not None:
        state.receipts.record(op.request, R.CLAIM, [first_fence, len(out)], now_ms)
    return result


def _named_groups(state: QueueState, out: Columns[LeasedJob]) -> LeasedJobs:
    """``out`` with the group of each of its grouped jobs named (``out.groups``)."""
    entries = state.jobs.entries  # (a held job is a Job, never a line)
    groups = {}
    claimed = cast("LeasedJobs", out)
    for i, job_id in enumerate(claimed.ids):
        job = entries.get(int(job_id[1:]))  # (ids the broker spelled: seq_of's checks not needed)
        if job is not None and not isinstance(job, bytes) and job.group is not None:
            groups[i] = job.group
    if groups:
        claimed.groups = groups
    return claimed


def _heartbeat(state: QueueState, op: Heartbeat, now_ms: int) -> Result:
    _check_lease(op.lease_ms)
    stored = tokens.checker(state)
    result = Result()
    renewed: set[int] = set()  # the claims renewed by this call: each once
    fences = list(state.claim_records) if state.seg_names else []
    for wire in op.tokens:
        token = stored(wire)
        if token is None:  # never looked up
            result.items.append(ItemResult(wire, False, tokens.NOT_VALID))
            continue
        job = live_job(state, token, now_ms)
        if job is None and fences:  # held at a segment part: its record renews it
            found = held_position(state, token, fences)
            if found is not None and not found[0].is_settled(found[1]) and \
                    found[0].expires_ms > now_ms:
                record, pos = found
                if pos in record.cancel:  # marked: it ends cancelled (from its own line)
                    job = materialize(state, record, pos)
                else:
                    result.changed = True
                    if record.fence not in renewed:
                        renewed.add(record.fence)
                        extend_claim(state, record, op.lease_ms, now_ms)
                    result.items.append(ItemResult(wire, True))
                    continue
        if job is None or job.lease is None:
            result.items.append(idempotency.unheld_answer(state, wire, token))
            continue
        result.changed = True
        if job.cancel_ms is not None:  # marked: it ends cancelled, and the worker is told
            result.items.append(cancels.end_marked(state, job, wire, now_ms))
            continue
        record = claim_of(state, job)
        if record.fence not in renewed:  # the lease is the claim's (docs/guarantees.md)
            renewed.add(record.fence)
            extend_claim(state, record, op.lease_ms, now_ms)
        result.items.append(ItemResult(wire, True))
    return result


def _complete(state: QueueState, op: Complete, now_ms: int) -> Result:
    limit = state.settings.max_payload_bytes
    for _, value in plain_rows(op.items):
        if value is not None and len(value) > limit:
            raise PayloadTooLarge(f"result is {len(value)} bytes; the limit is {limit}")
    stored = tokens.checker(state)
    result = Result()
    ended: list[str] = []
    fences_held: list[int] = []
    records = list(state.claim_records) if state.seg_names else []
    last: ClaimRecord | None = None  # the record the last held token named

    def held(wire: str, token: str, seq: int, value: bytes | None) -> ItemResult | None:
        nonlocal last
        found = held_position(state, token, records, last, seq) if records else None
        if found is None:
            return None
        record, pos = found
        last = record
        if record.is_settled(pos):  # a repeat answered from its done entry, if one has it
            return ItemResult(wire, True, None, COMPLETED) if done_at(record, pos) else None
        if record.expires_ms <= now_ms:
            return None  # (answered as any token that holds nothing)
        if pos in record.cancel:  # marked: ends cancelled, from a line of its own
            job = materialize(state, record, pos)
            if job is None:
                return None
            ended.append(wire)
            return cancels.end_marked(state, job, wire, now_ms)
        complete_position(state, record, pos, value, now_ms)
        fences_held.append(record.fence + pos)
        return ItemResult(wire, True, None, COMPLETED)

    def unheld(wire: str, token: str | None) -> ItemResult:
        job = None if token is None else live_job(state, token, now_ms)
        if job is not None and job.cancel_ms is not None:  # marked: ends cancelled instead
            ended.append(wire)
            return cancels.end_marked(state, job, wire, now_ms)
        return idempotency.repeat_answer(state, wire, token, R.COMPLETED)

    result.items, fences = complete_held(state, plain_rows(op.items), now_ms, stored, unheld,
                                         held if records else None)
    fences += fences_held
    result.changed = bool(ended)
    if fences:
        state.receipts.record_settled(R.COMPLETED, fences, now_ms, idempotency.retry_ttl_ms(state),
                                      state.settings.retry_keys)
        state.counters.completed += len(fences)
        result.changed = True
    return result


def _fail(state: QueueState, op: Fail, now_ms: int) -> Result:
    for item in op.items:
        if item.retry_in_ms is not None and not 0 <= item.retry_in_ms <= MAX_DELAY_MS:
            raise InvalidRequest(f"retry_in_s must be within [0, {MAX_DELAY_MS // 1000}], "
                                 f"got {item.retry_in_ms / 1000}")
    stored = tokens.checker(state)
    result = Result()
    materialize_live(state, (stored(item.token) for item in op.items), now_ms)
    for item in op.items:
        token = stored(item.token)
        job = None if token is None else live_job(state, token, now_ms)
        if job is None or job.lease is None:
            result.items.append(idempotency.repeat_answer(state, item.token, token, R.FAILED))
            continue
        result.changed = True
        if job.cancel_ms is not None:  # marked: ends cancelled, not failed
            result.items.append(cancels.end_marked(state, job, item.token, now_ms))
            continue
        fence = job.lease.fence
        status = _settle_failure(state, job, item.error, item.retry_in_ms, now_ms)
        # one by one, so a token listed twice in one call gets the same answer twice
        state.receipts.record_settled(R.DEAD if status == DEAD else R.FAILED, [fence], now_ms,
                                      idempotency.retry_ttl_ms(state), state.settings.retry_keys)
        result.items.append(ItemResult(item.token, True, status=status))
    return result


def _release(state: QueueState, op: Release, now_ms: int) -> Result:
    """Return the jobs still held under ``op.tokens`` to pending, as if never
    claimed (see :class:`Release`); ``ids`` and ``count`` say which."""
    if op.request is not None:
        receipt = state.receipts.requests.get(op.request)
        if receipt is None or receipt.kind != R.CLAIM or receipt.replayed:
            return Result()  # a repeat of the claim holds the jobs (or may): leave them
    stored = tokens.checker(state)
    released: list[str] = []
    ended = False
    materialize_live(state, map(stored, op.tokens), now_ms)
    for wire in op.tokens:  # the tokens the claim answered, tagged
        token = stored(wire)
        job = None if token is None else live_job(state, token, now_ms)
        if job is None:
            continue  # expired, settled or claimed again: no longer this claim's
        if job.cancel_ms is not None:  # marked meanwhile: it ends cancelled, not released
            cancels.end_marked(state, job, wire, now_ms)
            ended = True
            continue
        job.lease = None
        job.attempts = max(0, job.attempts - 1)
        move(state, job, PENDING, now_ms)  # where it stood: its run-at is unchanged
        released.append(job.id)
    return Result(changed=bool(released) or ended, ids=released, count=len(released))


def _reclaim(state: QueueState, op: Reclaim, now_ms: int) -> Result:
    result = Result()
    promote_due(state, now_ms)  # so the delayed heap's head is always in the future
    if state.groups is not None:  # groups parked until a due time or a token: woken
        state.groups.dispatch.advance(now_ms)
        state.groups.dispatch.sweep(now_ms)  # (full token buckets dropped: bounded memory)
    reclaimed: list[str] = []
    result.ids = reclaimed
    materialize_expired(state, now_ms)
    for job in expired_leases(state, now_ms):
        assert job.lease is not None
        if job.cancel_ms is not None:  # marked: ends cancelled, never pending again
            cancels.end_marked(state, job, job.lease.token, now_ms)
            result.changed = True
            continue
        worker = job.lease.worker
        _settle_failure(state, job, f"lease expired (worker {worker} stopped heartbeating)",
                        0, now_ms)
        state.counters.reclaimed += 1
        reclaimed.append(job.id)
    bound_stale_leases(state)
    idempotency.trim(state, now_ms)
    since = state.receipts.unwritten_since
    result.changed = result.changed or bool(reclaimed) or (
        since is not None and now_ms - since >= R.LAZY_WRITE_MS)
    if state.untagged_fences and tokens.untagged_done(state, _held_fences(state)):
        result.changed = True  # (written: the object no longer takes untagged tokens)
    return result


def _held_fences(state: QueueState) -> Iterator[int]:
    """The lowest number of a lease each claim record still holds."""
    for record in state.claim_records.values():
        if not record.done:  # (one whose every position settled awaits only its archive)
            yield record.fence + next(record.unsettled())


def _drop_archived(state: QueueState, op: DropArchived, now_ms: int) -> Result:
    dropped = sum(lifecycle.drop_completed(state, commit_seq) + drop_done(state, commit_seq)
                  for commit_seq in op.seqs)
    return Result(changed=bool(dropped), count=dropped)


def _redrive(state: QueueState, op: Redrive, now_ms: int) -> Result:
    earlier = idempotency.earlier(state, op.request, op.floor, R.REDRIVE, now_ms)
    if earlier is not None:
        return Result(count=earlier[0], replayed=True)
    if op.ids is None:
        targets = [j for j in state.jobs.touched() if j.status == DEAD]
    else:
        seqs = list(dict.fromkeys(map(seq_of, op.ids)))  # an id given twice is redriven once
        targets = [j for seq in seqs
                   if seq is not None and (j := state.jobs.get(seq)) is not None
                   and j.status == DEAD]
    for job in targets:
        job.attempts = 0
        job.run_at_ms = now_ms
        move(state, job, PENDING, now_ms)
    # (dead jobs in spill objects: all by reference, by id from loaded objects)
    count = len(targets) + (redrive_spilled(state, op.ids, now_ms) if state.spill_refs else 0)
    if op.request is not None:
        state.receipts.record(op.request, R.REDRIVE, [count], now_ms)
    return Result(changed=bool(count) or op.request is not None,
                  ids=[j.id for j in targets], count=count)


def _purge(state: QueueState, op: Purge, now_ms: int) -> Result:
    bad = set(op.statuses) - {PENDING, CLAIMED, DEAD}
    if bad:
        raise InvalidRequest(f"cannot purge status {shown(sorted(bad))}; use pending, claimed "
                             "or dead (completed jobs leave by themselves once archived)")
    earlier = idempotency.earlier(state, op.request, op.floor, R.PURGE, now_ms)
    if earlier is not None:
        return Result(count=earlier[0], replayed=True)
    statuses = set(op.statuses)
    # (jobs kept as lines are all pending: a purge of other statuses leaves them be)
    jobs = state.jobs.values() if PENDING in statuses else state.jobs.touched()
    doomed = [j for j in jobs if j.status in statuses]
    for job in doomed:
        move(state, job, GONE, now_ms)
    count = len(doomed) + (purge_held(state) if CLAIMED in statuses and state.seg_names else 0)
    if PENDING in statuses:
        count += purge_pending(state)
        if state.groups is not None:  # (every pending job went: each group's heap is stale)
            state.groups.stale.update(state.groups.heaps)
    count += purge_spilled(state, [s for s in (DEAD, PENDING) if s in statuses]) \
        if state.spill_refs else 0
    if op.request is not None:
        state.receipts.record(op.request, R.PURGE, [count], now_ms)
    return Result(changed=bool(count) or op.request is not None, count=count)


def _reserve(state: QueueState, op: Reserve, now_ms: int) -> Result:
    # (view: the max_attempts the jobs get, of this state, which lands with the seqs)
    return Result(changed=True, ids=reserve(state, op.count, op.largest),
                  view=state.settings.max_attempts)


_HANDLERS: dict[type, Callable[[QueueState, Any, int], Result]] = {
    Reserve: _reserve,
    Push: _push,
    PushPayloads: _push,
    Claim: _claim,
    Heartbeat: _heartbeat,
    Complete: _complete,
    Fail: _fail,
    Release: _release,
    Reclaim: _reclaim,
    DropArchived: _drop_archived,
    Redrive: _redrive,
    Purge: _purge,
    Cancel: cancels.cancel,
    SetPaused: queue_rules.set_paused,
    Configure: queue_rules.configure,
    TakeOver: queue_rules.take_over,
    RenewBroker: queue_rules.renew_broker,
    ClearBroker: queue_rules.clear_broker,
    ReadStats: queue_rules.read_stats,
    ReadJobs: queue_rules.read_jobs,
    Inspect: browse.read,
}


def apply(state: QueueState, op: Op, now_ms: int) -> Result:
    """Apply one operation at time ``now_ms``.

    Raises an ``OsqueueError`` (``InvalidRequest``, ``PayloadTooLarge``,
    ``QueueFull``) without changing the jobs when the operation is refused; a
    keyed call's floor still moves (written later, see :mod:`broker.model.receipts`).
    A keyed push refused as queue full is the exception: its refusal is
    remembered and written, and comes back as ``Result.error`` for the caller
    to raise once that write landed.
    """
    return _HANDLERS[type(op)](state, op, now_ms)


def new_state(now_ms: int, settings: QueueSettings | None = None) -> QueueState:
    """An empty queue. Its settings are a copy of ``settings``: a caller's default
    (the broker's, shared by every queue it creates) never becomes the queue's own."""
    return QueueState(updated_ms=now_ms,
                      settings=replace(settings) if settings else QueueSettings())
