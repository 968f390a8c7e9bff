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
* ``attempts`` counts claims; a job is claimed only while
  ``attempts < max_attempts``; a failure or an expired lease on the last
  attempt makes it ``dead``;
* a fencing token is valid only while its job is claimed under it and its
  lease has not expired at ``now_ms``; a stale token never completes,
  fails or extends a job;
* a push whose idempotency key is in the window returns the original id and
  creates nothing;
* a repeated call answers as the first did while its receipt is kept (see
  :mod:`broker.receipts`): a push with the same request key gets the same ids,
  a claim with the same request key the same jobs (those still held), a
  complete or fail of a token it already settled the same answer;
* a completed job stays, status ``completed`` with its result, until
  :class:`DropArchived` removes it once its archive object is written.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from broker import limits
from broker import receipts as R
from broker.errors import InvalidRequest, OsqueueError, PayloadTooLarge, QueueFull
from broker.limits import (
    MAX_DELAY_MS,
    MAX_ERROR_CHARS,
    MAX_LEASE_MS,
    MAX_PRIORITY,
    check_setting,
    dedup_cutoff_ms,
)
from broker.state import (
    CLAIMED,
    COMPLETED,
    DEAD,
    JOB_OVERHEAD_BYTES,
    PENDING,
    SEGMENT_SHIFT,
    SEQ_MASK,
    BrokerRecord,
    Job,
    JobIds,
    KeyEntry,
    Lease,
    QueueState,
    Settings,
    added,
    added_many,
    job_id_for,
    key_entry_bytes,
    key_seq,
    key_time,
    new_pending_jobs,
    ready_key,
    removed,
    seq_of,
    timed_key,
    token_seq,
    touch,
)

# -- operations ----------------------------------------------------------------


class NewJob(NamedTuple):
    """A job to push. ``payload`` is its JSON encoding (bytes).

    A NamedTuple, not a dataclass: pushes make millions of these, and a tuple
    is several times cheaper to build.
    """

    payload: bytes
    priority: int = 0
    delay_ms: int = 0
    max_attempts: int | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Push:
    """Enqueue jobs.

    ``request``: the caller's key for this call; a repeat while its receipt
    is kept answers the same ids and creates nothing. ``once``: a key in the
    idempotency window making the push happen at most once: a repeat creates
    nothing and sets ``Result.duplicate`` (Spark publishes staged writes this
    way). ``missing``: staged chunks of a publish that could not be found;
    unless ``once`` shows the publish happened already, the push is refused.
    """

    jobs: tuple[NewJob, ...]
    once: str | None = None
    request: str | None = None
    missing: int = 0
    floor: int | None = None  # the caller's calls below this number were answered


@dataclass(frozen=True, slots=True)
class PushPayloads:
    """:class:`Push` for jobs with default options, given as their payloads'
    JSON bytes: the bulk form (a Spark write publishes a million at once)."""

    payloads: tuple[bytes, ...]
    once: str | None = None
    request: str | None = None
    missing: int = 0
    floor: int | None = None


def push_of(jobs: Sequence[NewJob | bytes], once: str | None = None,
            request: str | None = None, missing: int = 0,
            floor: int | None = None) -> Push | PushPayloads:
    """The push of ``jobs`` (bare bytes: a payload with default options): the
    bulk :class:`PushPayloads` when every job is bare."""
    payloads = tuple(job for job in jobs if isinstance(job, bytes))
    if len(payloads) == len(jobs):
        return PushPayloads(payloads, once, request, missing, floor)
    return Push(tuple(NewJob(job) if isinstance(job, bytes) else job for job in jobs), once,
                request, missing, floor)


@dataclass(frozen=True, slots=True)
class Claim:
    """Claim up to ``max_jobs``. ``request``: the caller's key for this call; a
    repeat while its receipt is kept hands back the jobs the first call
    claimed that are still held under its leases, and claims nothing new.
    ``floor``: the caller's calls numbered below it were answered (their
    receipts can go, see :mod:`broker.receipts`)."""

    worker: str
    max_jobs: int = 1
    lease_ms: int = 30_000
    request: str | None = None
    floor: int | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    tokens: tuple[str, ...]
    lease_ms: int = 30_000


# Per-job items are NamedTuples, like NewJob: a claim or complete of thousands
# of jobs builds thousands of these, and a frozen dataclass costs several times more.
class CompleteItem(NamedTuple):
    token: str
    result: bytes | None = None  # JSON bytes


@dataclass(frozen=True, slots=True)
class Complete:
    items: tuple[CompleteItem, ...]


class FailItem(NamedTuple):
    token: str
    error: str = ""
    retry_in_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Fail:
    items: tuple[FailItem, ...]


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Return expired leases to pending (or dead); trim the key and receipt windows."""


@dataclass(frozen=True, slots=True)
class DropArchived:
    """Remove the completed jobs of the commits ``seqs``: their archive objects
    are written."""

    seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Redrive:
    """Return dead jobs to pending (``ids`` None: every dead job). ``request`` and
    ``floor`` as for :class:`Claim`: a repeat answers the first count."""

    ids: tuple[str, ...] | None = None
    request: str | None = None
    floor: int | None = None


@dataclass(frozen=True, slots=True)
class Purge:
    """Delete jobs by status. ``request`` and ``floor`` as for :class:`Claim`: a
    repeat answers the first count and deletes nothing more."""

    statuses: tuple[str, ...] = (PENDING, DEAD)
    request: str | None = None
    floor: int | None = None


@dataclass(frozen=True, slots=True)
class ReadStats:
    """Stats of the committed queue, read in the commit loop's order (a read
    never sees a batch whose write has not landed)."""


@dataclass(frozen=True, slots=True)
class ReadJobs:
    """A page of jobs (see :func:`list_jobs`), read in the commit loop's order;
    ``raw``: payloads as their stored bytes."""

    status: str | None = None
    limit: int = 100
    after: str | None = None
    raw: bool = False


@dataclass(frozen=True, slots=True)
class SetPaused:
    paused: bool


@dataclass(frozen=True, slots=True)
class Configure:
    settings: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TakeOver:
    """Become the queue's broker; every claimed job gets a fresh lease on our clock."""

    broker_id: str
    url: str
    lease_ms: int


@dataclass(frozen=True, slots=True)
class RenewBroker:
    broker_id: str
    url: str
    lease_ms: int


@dataclass(frozen=True, slots=True)
class ClearBroker:
    broker_id: str


Op = (
    Push | PushPayloads | Claim | Heartbeat | Complete | Fail | Reclaim | DropArchived | Redrive
    | Purge | SetPaused | Configure | TakeOver | RenewBroker | ClearBroker | ReadStats | ReadJobs
)

# -- results -------------------------------------------------------------------


class ClaimedJob(NamedTuple):
    id: str
    payload: bytes
    token: str
    attempt: int
    lease_expires_ms: int


class ItemResult(NamedTuple):
    token: str
    ok: bool
    reason: str | None = None
    status: str | None = None  # for fail: "pending" (retrying) or "dead"


# Builds a NamedTuple from a tuple of all its fields, skipping the generated
# __new__ (half the cost; these are made once per job in claim and complete).
_new_tuple = tuple.__new__


@dataclass(slots=True)
class Result:
    """What an operation produced. ``changed`` says whether a write is needed."""

    changed: bool = False
    ids: Sequence[str] = field(default_factory=list)
    jobs: list[ClaimedJob] = field(default_factory=list)
    items: list[ItemResult] = field(default_factory=list)
    count: int = 0
    duplicate: bool = False
    replayed: bool = False  # the answer of an earlier call with the same request key
    view: Any = None  # what a read op read
    error: OsqueueError | None = None  # a refusal that is written (a receipt): raise it


# -- helpers -------------------------------------------------------------------


def _schedule(state: QueueState, job: Job, now_ms: int) -> None:
    """Index a job that just became pending."""
    if job.run_at_ms <= now_ms:
        heapq.heappush(state.ready, ready_key(job.priority, job.run_at_ms, job.seq))
    else:
        heapq.heappush(state.delayed, timed_key(job.run_at_ms, job.seq))


def _promote_due(state: QueueState, now_ms: int) -> None:
    delayed = state.delayed
    while delayed and key_time(delayed[0]) <= now_ms:
        entry = heapq.heappop(delayed)
        seq, run_at = key_seq(entry), key_time(entry)
        job = state.jobs.get(seq)
        if job is not None and job.status == PENDING and job.run_at_ms == run_at:
            heapq.heappush(state.ready, ready_key(job.priority, run_at, seq))


def _token_job(state: QueueState, token: str) -> Job | None:
    """The job a token names (whether or not the token is still good)."""
    seq = token_seq(token)
    return None if seq is None else state.jobs.get(seq)


def live_job(state: QueueState, token: str, now_ms: int) -> Job | None:
    """The job ``token`` still holds at ``now_ms``, or None if the token is stale."""
    job = _token_job(state, token)
    lease = job.lease if job is not None and job.status == CLAIMED else None
    if lease is None or lease.token != token or lease.expires_ms <= now_ms:
        return None
    return job


def _stale_reason(state: QueueState, token: str) -> str:
    job = _token_job(state, token)
    if job is not None and job.lease is not None and job.lease.token == token:
        if job.status == COMPLETED:
            return "this token already completed the job"
        return "lease expired; the job will be reclaimed"
    fence = R.fence_of(token)
    outcome = state.receipts.outcome(fence) if fence is not None else None
    if outcome is not None:
        return f"this token already settled the job ({outcome})"
    if job is None:
        return "job is gone (completed, purged or never existed)"
    return "token is stale; the job was reclaimed or claimed again"


_FAIL_STATUS = {R.FAILED: PENDING, R.DEAD: DEAD}


def _repeat_answer(state: QueueState, token: str, want: str) -> ItemResult:
    """The answer to a complete (``want`` completed) or fail (``want`` failed) of a
    token that holds no live lease: what the first call answered if this token
    settled the job the same way, else stale."""
    job = _token_job(state, token)
    if job is not None and job.status == COMPLETED and job.lease is not None \
            and job.lease.token == token:
        outcome: str | None = R.COMPLETED
    else:
        fence = R.fence_of(token)
        outcome = state.receipts.outcome(fence) if fence is not None else None
    if want == R.COMPLETED and outcome == R.COMPLETED:
        return ItemResult(token, True, None, COMPLETED)
    if want == R.FAILED and outcome in _FAIL_STATUS:
        return ItemResult(token, True, None, _FAIL_STATUS[outcome])
    return ItemResult(token, False, _stale_reason(state, token))


def backoff_ms(settings: Settings, attempts: int) -> int:
    """Delay before retry number ``attempts`` (1-based): base * 2**(attempts-1), capped."""
    delay = settings.backoff_base_s * (2 ** max(0, attempts - 1))
    return round(min(delay, settings.backoff_max_s) * 1000)


def _settle_failure(state: QueueState, job: Job, error: str, retry_in_ms: int | None,
                    now_ms: int) -> str:
    """Move a claimed job back to pending (retry) or dead; return the new status."""
    job.lease = None
    job.last_error = error[-MAX_ERROR_CHARS:] if error else None
    state.counters.failed += 1
    if job.attempts >= job.max_attempts:
        job.status = DEAD
        state.counters.dead += 1
    else:
        job.status = PENDING
        delay = retry_in_ms if retry_in_ms is not None else backoff_ms(state.settings, job.attempts)
        job.run_at_ms = now_ms + max(0, delay)
        _schedule(state, job, now_ms)
    touch(state, job)
    return job.status


def _validate_new(state: QueueState, new: NewJob) -> int:
    """Check one new job; return its size estimate."""
    limit = state.settings.max_payload_bytes
    if len(new.payload) > limit:
        raise PayloadTooLarge(
            f"payload is {len(new.payload)} bytes; this queue's limit is {limit} bytes"
        )
    if not -MAX_PRIORITY <= new.priority <= MAX_PRIORITY:
        raise InvalidRequest(f"priority must be within +-{MAX_PRIORITY}, got {new.priority}")
    if not 0 <= new.delay_ms <= MAX_DELAY_MS:
        raise InvalidRequest(f"delay must be within [0, {MAX_DELAY_MS // 1000}] s, "
                             f"got {new.delay_ms / 1000} s")
    if new.max_attempts is not None and not 1 <= new.max_attempts <= 1000:
        raise InvalidRequest(f"max_attempts must be 1..1000, got {new.max_attempts}")
    if new.key is not None and not 0 < len(new.key) <= 512:
        raise InvalidRequest("idempotency keys must be 1..512 characters")
    return len(new.payload) + JOB_OVERHEAD_BYTES


_OPTIONS = operator.itemgetter(1, 2, 3, 4)  # NewJob's fields after the payload
_DEFAULT_OPTIONS = (0, 0, None, None)


def _insert_jobs(state: QueueState, jobs: Sequence[NewJob], now_ms: int) -> Sequence[str]:
    """Validate all, then create all (or raise having created nothing)."""
    if jobs and set(map(_OPTIONS, jobs)) == {_DEFAULT_OPTIONS}:
        return _insert_payloads(state, [new[0] for new in jobs], now_ms)
    window = state.keys
    oldest_ok = dedup_cutoff_ms(state.settings.dedup_ttl_s, now_ms)

    def seen(key: str) -> KeyEntry | None:
        entry = window.get(key)
        return entry if entry is not None and entry.at_ms >= oldest_ok else None

    fresh: dict[str, int] = {}
    incoming = 0
    for new in jobs:
        size = _validate_new(state, new)
        if new.key is not None and (seen(new.key) is not None or new.key in fresh):
            continue
        if new.key is not None:
            fresh[new.key] = 0
        incoming += size
    _check_room(state, incoming)
    ids: list[str] = []
    created: dict[str, str] = {}
    counters, all_jobs, settings_max = state.counters, state.jobs, state.settings.max_attempts
    for new in jobs:
        if new.key is not None:
            entry = seen(new.key)
            if entry is not None:
                ids.append(entry.job_id)
                continue
            if new.key in created:
                ids.append(created[new.key])
                continue
        counters.enqueued += 1
        seq = counters.enqueued
        job = Job(seq, new.payload, PENDING, new.priority,
                  now_ms + new.delay_ms, 0, new.max_attempts or settings_max, now_ms, new.key)
        all_jobs[seq] = job
        added(state, job)
        _schedule(state, job, now_ms)
        if new.key is not None:
            created[new.key] = job.id
            _remember_key(state, new.key, KeyEntry(job.id, now_ms))
        ids.append(job.id)
    state.approx_bytes += incoming
    return ids


def _remember_key(state: QueueState, key: str, entry: KeyEntry) -> None:
    """Put ``key`` at the young end of the window (which stays in time order)."""
    window = state.keys
    if window.pop(key, None) is None:
        state.key_bytes += key_entry_bytes(key)
    window[key] = entry


def _check_room(state: QueueState, incoming: int) -> None:
    if incoming and state.size_estimate() + incoming > state.settings.max_state_bytes:
        raise QueueFull(
            f"queue full: the object would grow past {state.settings.max_state_bytes} bytes; "
            "nothing from this push was written"
        )


def _insert_payloads(state: QueueState, payloads: Sequence[bytes], now_ms: int) -> JobIds:
    """:func:`_insert_jobs` for jobs with default options (the bulk path)."""
    if not payloads:
        return JobIds(0, 0)
    limit = state.settings.max_payload_bytes
    sizes = list(map(len, payloads))
    if max(sizes) > limit:
        raise PayloadTooLarge(f"payload is {max(sizes)} bytes; this queue's limit is {limit} bytes")
    incoming = sum(sizes) + JOB_OVERHEAD_BYTES * len(payloads)
    _check_room(state, incoming)
    counters = state.counters
    first = counters.enqueued + 1
    jobs = new_pending_jobs(first, payloads, now_ms, state.settings.max_attempts)
    counters.enqueued += len(jobs)
    seqs = range(first, first + len(jobs))
    state.jobs.update(zip(seqs, jobs, strict=True))
    ids = JobIds(first, len(jobs))
    added_many(state, jobs)
    ready = state.ready
    base = ready_key(0, now_ms, 0)
    entries = range(base + first, base + first + len(jobs))
    if ready:
        for entry in entries:
            heapq.heappush(ready, entry)
    else:
        ready.extend(entries)  # ascending, so already a heap
    state.approx_bytes += incoming
    return ids


def _retry_ttl_ms(state: QueueState) -> int:
    return round(state.settings.retry_ttl_s * 1000)


def _trim_windows(state: QueueState, now_ms: int) -> None:
    """Drop idempotency keys and receipts past their age or count limits."""
    window, settings = state.keys, state.settings
    oldest_ok = dedup_cutoff_ms(settings.dedup_ttl_s, now_ms)
    cap = settings.dedup_keys
    while window:
        first = next(iter(window))
        if len(window) > cap or window[first].at_ms < oldest_ok:
            del window[first]
            state.key_bytes -= key_entry_bytes(first)
        else:
            break
    once, once_cap = state.once, max(cap, limits.ONCE_KEYS_MIN)
    while once:
        first = next(iter(once))
        if len(once) > once_cap or once[first].at_ms < oldest_ok:
            del once[first]
            state.key_bytes -= key_entry_bytes(first)
        else:
            break
    state.receipts.trim(now_ms, round(settings.retry_ttl_s * 1000), settings.retry_keys)


def _live_key(state: QueueState, key: str, now_ms: int) -> bool:
    entry = state.once.get(key)
    return entry is not None and entry.at_ms >= dedup_cutoff_ms(state.settings.dedup_ttl_s, now_ms)


def _earlier(state: QueueState, request: str | None, floor: int | None,
             kind: str, now_ms: int) -> list[int] | None:
    """What an earlier call with this request key answered (None: none did).

    Applies the caller's floor first: it takes effect at once and is written
    with the next write or within :data:`broker.receipts.LAZY_WRITE_MS` (a poll
    that claims nothing costs no write of its own). Refuses a late attempt of a
    call whose answer its client already had (below its floor)."""
    if request is None:
        return None
    receipts = state.receipts
    if receipts.below_floor(request):
        raise InvalidRequest(f"request {request} was answered before (its client has moved "
                             "past it); a late copy of it is not applied")
    if floor is not None and receipts.answered_below(request, floor, now_ms):
        receipts.later(now_ms)
    return receipts.answered(request, kind)


def _remove(state: QueueState, job: Job) -> None:
    del state.jobs[job.seq]
    removed(state, job)
    state.approx_bytes -= job.size_estimate()


# -- operation handlers -----------------------------------------------------------


def _ids_of(seqs: list[int]) -> Sequence[str]:
    if seqs and seqs[-1] - seqs[0] == len(seqs) - 1 and seqs == list(
            range(seqs[0], seqs[-1] + 1)):
        return JobIds(seqs[0], len(seqs))
    return [job_id_for(seq) for seq in seqs]


def _push(state: QueueState, op: Push | PushPayloads, now_ms: int) -> Result:
    earlier = _earlier(state, op.request, op.floor, R.PUSH, now_ms)
    if earlier is not None:
        if not earlier:  # the first attempt was refused (and that is written): so is this
            return Result(replayed=True, error=QueueFull(
                "queue full: this push was refused before (a repeat of it); "
                "nothing from it was written"))
        return Result(ids=_ids_of(list(R.expand(earlier))), replayed=True)
    if op.once is not None and _live_key(state, op.once, now_ms):
        return Result(duplicate=True)
    if op.missing:
        raise InvalidRequest(f"{op.missing} staged chunk(s) of this write are missing; "
                             "nothing was published")
    ids: Sequence[str]
    try:
        if isinstance(op, PushPayloads):
            ids = _insert_payloads(state, op.payloads, now_ms)
        else:
            ids = _insert_jobs(state, op.jobs, now_ms)
    except QueueFull as exc:
        if op.request is None:
            raise
        # Refused for the state the queue is in, which changes: remember it, written
        # before the caller hears of it (the write also fences out any earlier attempt
        # of this call), so a late copy is refused too, not applied once there is room.
        state.receipts.record(op.request, R.PUSH, [], now_ms)
        _trim_windows(state, now_ms)
        return Result(changed=True, error=exc)
    if op.once is not None:
        if state.once.pop(op.once, None) is None:  # (re-inserted at the young end)
            state.key_bytes += key_entry_bytes(op.once)
        state.once[op.once] = KeyEntry("(published)", now_ms)
    if op.request is not None:
        runs = ([ids.first, len(ids)] if isinstance(ids, JobIds)
                else R.runs_of(seq_of(i) or 0 for i in ids))
        state.receipts.record(op.request, R.PUSH, runs, now_ms)
    _trim_windows(state, now_ms)
    return Result(changed=True, ids=ids)


def _claim(state: QueueState, op: Claim, now_ms: int) -> Result:
    if op.max_jobs < 1 or op.max_jobs > 10_000:
        raise InvalidRequest(f"max_jobs must be 1..10000, got {op.max_jobs}")
    if not 0 < op.lease_ms <= MAX_LEASE_MS:
        raise InvalidRequest(f"lease must be within (0, 86400] s, got {op.lease_ms / 1000}")
    if not op.worker or len(op.worker) > 200:
        raise InvalidRequest("worker must be a name of 1..200 characters")
    earlier = _earlier(state, op.request, op.floor, R.CLAIM, now_ms)
    if earlier is not None:
        return Result(jobs=_still_held(state, earlier[0], earlier[1], now_ms), replayed=True)
    result = Result()
    if state.paused:
        return result
    _promote_due(state, now_ms)
    first_fence = state.counters.fence + 1
    ready, leases, get, out = state.ready, state.leases, state.jobs.get, result.jobs
    counters, dirty = state.counters, state.dirty
    expires = now_ms + op.lease_ms
    heappop, heappush = heapq.heappop, heapq.heappush
    while ready and len(out) < op.max_jobs:
        entry = heappop(ready)
        seq = entry & SEQ_MASK
        job = get(seq)
        if job is None or job.status != PENDING or ready_key(
                job.priority, job.run_at_ms, seq) != entry:
            continue  # a stale entry: the job moved on
        if job.run_at_ms > now_ms:  # indexed early (clock moved back, or after a load)
            heappush(state.delayed, timed_key(job.run_at_ms, seq))
            continue
        counters.fence += 1
        job_id = "j%010d" % seq  # noqa: UP031 (job_id_for, inlined)
        token = f"{job_id}.{counters.fence}"
        job.status = CLAIMED
        job.attempts += 1
        job.lease = Lease(token, op.worker, op.lease_ms, expires, now_ms)
        job._enc = None  # touch(), inlined: this loop runs once per claimed job
        dirty.add(seq >> SEGMENT_SHIFT)
        heappush(leases, timed_key(expires, seq))
        out.append(_new_tuple(ClaimedJob, (job_id, job.payload, token, job.attempts, expires)))
    result.changed = bool(out)
    if out and op.request is not None:
        state.receipts.record(op.request, R.CLAIM, [first_fence, len(out)], now_ms)
    return result


def _still_held(state: QueueState, first_fence: int, count: int,
                now_ms: int) -> list[ClaimedJob]:
    """The jobs still held under the leases numbered ``first_fence`` onwards
    (``count`` of them), in the order they were claimed. Scans the jobs: only
    a repeated claim comes here."""
    held = []
    for job in state.jobs.values():
        lease = job.lease
        if job.status == CLAIMED and lease is not None and lease.expires_ms > now_ms and \
                first_fence <= lease.fence < first_fence + count:
            held.append((lease.fence, ClaimedJob(job.id, job.payload, lease.token,
                                                 job.attempts, lease.expires_ms)))
    return [claimed for _, claimed in sorted(held)]


def _heartbeat(state: QueueState, op: Heartbeat, now_ms: int) -> Result:
    if not 0 < op.lease_ms <= MAX_LEASE_MS:
        raise InvalidRequest(f"lease must be within (0, 86400] s, got {op.lease_ms / 1000}")
    result = Result()
    for token in op.tokens:
        job = live_job(state, token, now_ms)
        if job is None or job.lease is None:
            result.items.append(ItemResult(token, False, _stale_reason(state, token)))
            continue
        lease = job.lease
        lease.expires_ms = now_ms + op.lease_ms
        lease.lease_ms = op.lease_ms
        lease.heartbeat_ms = now_ms
        touch(state, job)
        heapq.heappush(state.leases, timed_key(lease.expires_ms, job.seq))
        result.items.append(ItemResult(token, True))
        result.changed = True
    return result


def _complete(state: QueueState, op: Complete, now_ms: int) -> Result:
    limit = state.settings.max_payload_bytes
    for item in op.items:
        if item.result is not None and len(item.result) > limit:
            raise PayloadTooLarge(f"result is {len(item.result)} bytes; the limit is {limit}")
    result = Result()
    commit_seq = state.seq + 1
    items, get, dirty = result.items, state.jobs.get, state.dirty
    done: list[int] = []  # job seqs
    fences: list[int] = []
    added_bytes = 0
    for token, value in op.items:
        seq = token_seq(token)  # live_job(), inlined: this runs once per job
        job = None if seq is None else get(seq)
        lease = job.lease if job is not None and job.status == CLAIMED else None
        if lease is None or lease.token != token or lease.expires_ms <= now_ms:
            items.append(_repeat_answer(state, token, R.COMPLETED))
            continue
        assert job is not None and seq is not None
        job.status = COMPLETED
        job.done_ms = now_ms
        job.done_seq = commit_seq
        job.result = value
        job._enc = None  # touch(), inlined
        dirty.add(seq >> SEGMENT_SHIFT)
        done.append(seq)
        fences.append(int(token[token.rindex(".") + 1:]))
        if value is not None:
            added_bytes += len(value)
        items.append(_new_tuple(ItemResult, (token, True, None, COMPLETED)))
    if done:
        state.completed.setdefault(commit_seq, []).extend(done)
        state.receipts.record_settled(R.COMPLETED, fences, now_ms, _retry_ttl_ms(state),
                                      state.settings.retry_keys)
        state.counters.completed += len(done)
        state.approx_bytes += added_bytes
        result.changed = True
    return result


def _fail(state: QueueState, op: Fail, now_ms: int) -> Result:
    for item in op.items:
        if item.retry_in_ms is not None and not 0 <= item.retry_in_ms <= MAX_DELAY_MS:
            raise InvalidRequest(f"retry_in_s must be within [0, {MAX_DELAY_MS // 1000}], "
                                 f"got {item.retry_in_ms / 1000}")
    result = Result()
    for item in op.items:
        job = live_job(state, item.token, now_ms)
        if job is None or job.lease is None:
            result.items.append(_repeat_answer(state, item.token, R.FAILED))
            continue
        fence = job.lease.fence
        status = _settle_failure(state, job, item.error, item.retry_in_ms, now_ms)
        # one by one, so a token listed twice in one call gets the same answer twice
        state.receipts.record_settled(R.DEAD if status == DEAD else R.FAILED, [fence], now_ms,
                                      _retry_ttl_ms(state), state.settings.retry_keys)
        result.items.append(ItemResult(item.token, True, status=status))
        result.changed = True
    return result


def _reclaim(state: QueueState, op: Reclaim, now_ms: int) -> Result:
    result = Result()
    _promote_due(state, now_ms)  # so the delayed heap's head is always in the future
    reclaimed: list[str] = []
    result.ids = reclaimed
    leases = state.leases
    while leases and key_time(leases[0]) <= now_ms:
        entry = heapq.heappop(leases)
        seq, expires = key_seq(entry), key_time(entry)
        job = state.jobs.get(seq)
        if job is None or job.status != CLAIMED or job.lease is None or \
                job.lease.expires_ms != expires:
            continue  # an old heap entry: the job moved on or its lease was extended
        worker = job.lease.worker
        _settle_failure(state, job, f"lease expired (worker {worker} stopped heartbeating)",
                        0, now_ms)
        state.counters.reclaimed += 1
        reclaimed.append(job.id)
    # Stale entries (completed jobs, extended leases) wait for their time to
    # come; compacting whenever the heap outgrows the whole queue twice over
    # bounds them without counting claimed jobs on every commit.
    if len(leases) > 64 + 2 * len(state.jobs):
        _compact_leases(state)
    _trim_windows(state, now_ms)
    since = state.receipts.unwritten_since
    result.changed = bool(reclaimed) or (since is not None and
                                         now_ms - since >= R.LAZY_WRITE_MS)
    return result


def _drop_archived(state: QueueState, op: DropArchived, now_ms: int) -> Result:
    dropped = 0
    for commit_seq in op.seqs:
        for seq in state.completed.pop(commit_seq, ()):
            job = state.jobs.get(seq)
            if job is not None and job.status == COMPLETED and job.done_seq == commit_seq:
                _remove(state, job)
                dropped += 1
    return Result(changed=bool(dropped), count=dropped)


def _compact_leases(state: QueueState) -> None:
    state.leases = [
        timed_key(j.lease.expires_ms, j.seq)
        for j in state.jobs.values()
        if j.status == CLAIMED and j.lease is not None
    ]
    heapq.heapify(state.leases)


def _redrive(state: QueueState, op: Redrive, now_ms: int) -> Result:
    earlier = _earlier(state, op.request, op.floor, R.REDRIVE, now_ms)
    if earlier is not None:
        return Result(count=earlier[0], replayed=True)
    if op.ids is None:
        targets = [j for j in state.jobs.values() if j.status == DEAD]
    else:
        seqs = [seq_of(i) for i in op.ids]
        targets = [j for seq in seqs
                   if seq is not None and (j := state.jobs.get(seq)) is not None
                   and j.status == DEAD]
    for job in targets:
        job.status = PENDING
        job.attempts = 0
        job.run_at_ms = now_ms
        touch(state, job)
        _schedule(state, job, now_ms)
    if op.request is not None:
        state.receipts.record(op.request, R.REDRIVE, [len(targets)], now_ms)
    return Result(changed=bool(targets) or op.request is not None,
                  ids=[j.id for j in targets], count=len(targets))


def _purge(state: QueueState, op: Purge, now_ms: int) -> Result:
    bad = set(op.statuses) - {PENDING, CLAIMED, DEAD}
    if bad:
        raise InvalidRequest(f"cannot purge status {sorted(bad)}; use pending, claimed or dead "
                             "(completed jobs leave by themselves once archived)")
    earlier = _earlier(state, op.request, op.floor, R.PURGE, now_ms)
    if earlier is not None:
        return Result(count=earlier[0], replayed=True)
    statuses = set(op.statuses)
    doomed = [j for j in state.jobs.values() if j.status in statuses]
    for job in doomed:
        _remove(state, job)
    if op.request is not None:
        state.receipts.record(op.request, R.PURGE, [len(doomed)], now_ms)
    return Result(changed=bool(doomed) or op.request is not None, count=len(doomed))


def _read_stats(state: QueueState, op: ReadStats, now_ms: int) -> Result:
    return Result(view=stats(state, now_ms))


def _read_jobs(state: QueueState, op: ReadJobs, now_ms: int) -> Result:
    page = list_jobs(state, op.status, op.limit, op.after)
    return Result(view=[job.to_dict() if op.raw else job.to_plain() for job in page])


def _set_paused(state: QueueState, op: SetPaused, now_ms: int) -> Result:
    changed = state.paused != op.paused
    state.paused = op.paused
    return Result(changed=changed)


def _configure(state: QueueState, op: Configure, now_ms: int) -> Result:
    merged: dict[str, Any] = {name: getattr(state.settings, name)
                              for name in state.settings.__slots__}
    for name, value in op.settings.items():
        try:
            merged[name] = check_setting(name, value)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
    if merged["backoff_base_s"] > merged["backoff_max_s"]:
        raise InvalidRequest(f"backoff_base_s ({merged['backoff_base_s']}) must not exceed "
                             f"backoff_max_s ({merged['backoff_max_s']})")
    state.settings = Settings(**merged)
    _trim_windows(state, now_ms)
    return Result(changed=True)


def _take_over(state: QueueState, op: TakeOver, now_ms: int) -> Result:
    """Become the broker. Every claimed job gets a fresh lease on this broker's
    clock (its own length from now), whatever the expiry written on the
    previous broker's clock said: a lease that ran out while no broker
    served is renewed, not reclaimed, and clock skew never reclaims early.
    Idempotency keys and receipts are re-timed to now for the same reason."""
    previous = state.broker.id if state.broker else None
    state.broker = BrokerRecord(op.broker_id, op.url, now_ms + op.lease_ms, op.lease_ms)
    if previous != op.broker_id:
        for job in state.jobs.values():
            if job.status == CLAIMED and job.lease is not None:
                job.lease.expires_ms = now_ms + job.lease.lease_ms
                touch(state, job)
        _compact_leases(state)
        # The windows' times were written on the previous broker's clock too: they
        # start again from now on ours (they may live up to a window longer).
        for entry in (*state.keys.values(), *state.once.values()):
            entry.at_ms, entry.enc = now_ms, None
        state.receipts.rebase(now_ms)
    return Result(changed=True)


def _renew_broker(state: QueueState, op: RenewBroker, now_ms: int) -> Result:
    state.broker = BrokerRecord(op.broker_id, op.url, now_ms + op.lease_ms, op.lease_ms)
    return Result(changed=True)


def _clear_broker(state: QueueState, op: ClearBroker, now_ms: int) -> Result:
    if state.broker is None or state.broker.id != op.broker_id:
        return Result()
    state.broker = None
    return Result(changed=True)


_HANDLERS: dict[type, Callable[[QueueState, Any, int], Result]] = {
    Push: _push,
    PushPayloads: _push,
    Claim: _claim,
    Heartbeat: _heartbeat,
    Complete: _complete,
    Fail: _fail,
    Reclaim: _reclaim,
    DropArchived: _drop_archived,
    Redrive: _redrive,
    Purge: _purge,
    SetPaused: _set_paused,
    Configure: _configure,
    TakeOver: _take_over,
    RenewBroker: _renew_broker,
    ClearBroker: _clear_broker,
    ReadStats: _read_stats,
    ReadJobs: _read_jobs,
}


def apply(state: QueueState, op: Op, now_ms: int) -> Result:
    """Apply one operation at time ``now_ms``.

    Raises an ``OsqueueError`` (``InvalidRequest``, ``PayloadTooLarge``,
    ``QueueFull``) without changing the jobs when the operation is refused; a
    keyed call's floor still moves (written later, see :mod:`broker.receipts`).
    A keyed push refused as queue full is the exception: its refusal is
    remembered and written, and comes back as ``Result.error`` for the caller
    to raise once that write landed.
    """
    return _HANDLERS[type(op)](state, op, now_ms)


def new_state(now_ms: int, settings: Settings | None = None) -> QueueState:
    """An empty queue."""
    return QueueState(updated_ms=now_ms, settings=settings or Settings())


# The read-only views live in broker.views; re-exported for the callers that read
# them with the transitions (and used by the read ops above).
from broker.views import list_jobs as list_jobs  # noqa: E402
from broker.views import next_wakeup_ms as next_wakeup_ms  # noqa: E402
from broker.views import stats as stats  # noqa: E402
