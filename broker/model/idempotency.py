"""What a queue remembers about earlier calls, and for how long.

Three windows, each trimmed by age and count (see :mod:`broker.limits` and
the ``dedup_*`` and ``retry_*`` settings):

* idempotency keys of jobs (``state.keys``): a push whose key is in the window
  answers the first job's id and creates nothing;
* publish keys (``state.once``): a Spark write or stream batch happens once;
* receipts (``state.receipts``, see :mod:`broker.model.receipts`): a retried call
  answers what the first attempt answered (:func:`earlier`; for a complete or
  fail of a token, :func:`repeat_answer`).

The dedup cutoff is computed in one place (:func:`broker.limits.dedup_cutoff_ms`).
No I/O and no clock: time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Callable

from broker import limits
from broker.errors import InvalidRequest
from broker.limits import dedup_cutoff_ms
from broker.model import receipts as R
from broker.model.job import CANCELLED, COMPLETED, DEAD, PENDING
from broker.model.lifecycle import token_job
from broker.model.state import KeyEntry, QueueState, key_entry_bytes
from broker.model.tokens import NOT_VALID
from broker.wire import ItemResult


def seen_keys(state: QueueState, now_ms: int) -> Callable[[str], KeyEntry | None]:
    """A lookup of the idempotency-key window as it counts at ``now_ms``: the
    entry of a key, or None if the key is not in the window or too old."""
    window = state.keys
    oldest_ok = dedup_cutoff_ms(state.settings.dedup_ttl_s, now_ms)

    def seen(key: str) -> KeyEntry | None:
        entry = window.get(key)
        return entry if entry is not None and entry.at_ms >= oldest_ok else None

    return seen


def remember_key(state: QueueState, key: str, job_id: str, now_ms: int) -> None:
    """Put ``key`` (naming ``job_id``) at the young end of the window, which stays
    in time order."""
    window = state.keys
    if window.pop(key, None) is None:
        state.key_bytes += key_entry_bytes(key)
    window[key] = KeyEntry(job_id, now_ms)


def published(state: QueueState, key: str, now_ms: int) -> bool:
    """True if the publish key ``key`` is in its window at ``now_ms``."""
    entry = state.once.get(key)
    return entry is not None and entry.at_ms >= dedup_cutoff_ms(state.settings.dedup_ttl_s, now_ms)


def remember_published(state: QueueState, key: str, now_ms: int) -> None:
    """Put publish key ``key`` at the young end of its window."""
    if state.once.pop(key, None) is None:  # (re-inserted at the young end)
        state.key_bytes += key_entry_bytes(key)
    state.once[key] = KeyEntry("(published)", now_ms)


def restart(state: QueueState, now_ms: int) -> None:
    """Re-time every key to ``now_ms`` (a new broker's clock: the times were
    written on the previous one's, so the keys may live up to a window longer)."""
    for window in (state.keys, state.once):
        for key, entry in window.items():
            window[key] = KeyEntry(entry.job_id, now_ms)
    state.receipts.rebase(now_ms)


def retry_ttl_ms(state: QueueState) -> int:
    """How long (ms) a receipt is kept: the ``retry_ttl_s`` setting."""
    return round(state.settings.retry_ttl_s * 1000)


def trim(state: QueueState, now_ms: int) -> None:
    """Drop idempotency keys, publish keys and receipts past their age or count limits."""
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
    state.receipts.trim(now_ms, retry_ttl_ms(state), settings.retry_keys)


def earlier(state: QueueState, request: str | None, floor: int | None,
            kind: str, now_ms: int, digest: str | None = None) -> list[int] | None:
    """What an earlier call with this request key answered (None: none did).

    Applies the caller's floor first: it takes effect at once and is written
    with the next write or within :data:`broker.model.receipts.LAZY_WRITE_MS` (a poll
    that claims nothing costs no write of its own). Raises ``InvalidRequest``
    for a late attempt of a call whose answer its client already had (below
    its floor), and (a push, ``digest`` its jobs') ``RequestKeyReused`` if the
    key's receipt holds other jobs; either before anything changed."""
    if request is None:
        return None
    receipts = state.receipts
    if receipts.below_floor(request):
        raise InvalidRequest(f"request {request} was answered before (its client has moved "
                             "past it); a late copy of it is not applied")
    if digest is not None:
        receipts.check_same_push(request, digest)
    if floor is not None and receipts.answered_below(request, floor, now_ms):
        receipts.later(now_ms)
    return receipts.answered(request, kind)


#: Why a call about a cancelled job did nothing (answered with status cancelled).
CANCELLED_REASON = "the job was cancelled; stop working on it (nothing was recorded)"


def cancelled_under(state: QueueState, token: str) -> bool:
    """Whether the stored token ``token`` held a job that was cancelled (or is
    marked, its lease run out): its calls are answered cancelled."""
    job = token_job(state, token)
    if job is not None and job.lease_token == token:
        return job.status == CANCELLED or job.cancel_ms is not None
    fence = R.fence_of(token)
    return fence is not None and state.receipts.outcome(fence) == R.CANCELLED


def unheld_answer(state: QueueState, wire: str, token: str) -> ItemResult:
    """The answer to a heartbeat of a client's token ``wire`` (stored token
    ``token``) that holds no live lease: stale, or cancelled."""
    if cancelled_under(state, token):
        return ItemResult(wire, False, CANCELLED_REASON, CANCELLED)
    return ItemResult(wire, False, stale_reason(state, token))


def stale_reason(state: QueueState, token: str) -> str:
    """Why the stored token ``token`` holds no live lease, in words for its caller.
    Not for a token :func:`cancelled_under` answers (its callers ask that first)."""
    job = token_job(state, token)
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


def repeat_answer(state: QueueState, wire: str, token: str | None, want: str) -> ItemResult:
    """The answer to a complete (``want`` completed) or fail (``want`` failed) of a
    client's token ``wire`` that holds no live lease: what the first call
    answered if this token settled the job the same way, cancelled (ok false,
    status cancelled) if its job was cancelled, else stale.
    ``token``: the stored token ``wire`` stands for, None if its tag does not
    verify (answered :data:`~broker.model.tokens.NOT_VALID`, looked up nowhere)."""
    if token is None:
        return ItemResult(wire, False, NOT_VALID)
    if cancelled_under(state, token):
        return ItemResult(wire, False, CANCELLED_REASON, CANCELLED)
    job = token_job(state, token)
    if job is not None and job.status == COMPLETED and job.lease is not None \
            and job.lease.token == token:
        outcome: str | None = R.COMPLETED
    else:
        fence = R.fence_of(token)
        outcome = state.receipts.outcome(fence) if fence is not None else None
    if want == R.COMPLETED and outcome == R.COMPLETED:
        return ItemResult(wire, True, None, COMPLETED)
    if want == R.FAILED and outcome in _FAIL_STATUS:
        return ItemResult(wire, True, None, _FAIL_STATUS[outcome])
    return ItemResult(wire, False, stale_reason(state, token))
