"""The rules of the queue as a whole: pausing it, its settings, which broker
serves it, and the reads that run in the commit loop's order.

Handlers of :func:`broker.model.transitions.apply` (which dispatches here), with the
same contract: no I/O, time passed in, refuse before changing anything.
"""

from __future__ import annotations

from typing import Any

from broker.errors import InvalidRequest
from broker.limits import MIN_RATE_PER_S, check_setting
from broker.model import idempotency
from broker.model.groups.settings import GROUP_SETTINGS, parse_group_settings
from broker.model.lifecycle import restart_leases
from broker.model.ops import (
    ClearBroker,
    Configure,
    JobsView,
    ReadJobs,
    ReadStats,
    RenewBroker,
    Result,
    SetPaused,
    TakeOver,
)
from broker.model.segments.grouped import dissolve
from broker.model.state import BrokerRecord, QueueSettings, QueueState
from broker.model.views import list_page, stats


def read_stats(state: QueueState, op: ReadStats, now_ms: int) -> Result:
    """The queue's stats (see :func:`broker.model.views.stats`)."""
    return Result(view=stats(state, now_ms))


def read_jobs(state: QueueState, op: ReadJobs, now_ms: int) -> Result:
    """A page of jobs as dicts (each with its error history ``errors``, ``[]``
    for a job that never failed), and where to read on if it was cut short: a
    :class:`~broker.model.ops.JobsView` (see :func:`broker.model.views.list_page`). A
    lease's token is left out unless ``op.tokens``; then it is the token as the
    claim answered it (left out still if the state has no token key: a read
    of an object from before tokens were tagged, which no token fits)."""
    page, cut = list_page(state, op.status, op.limit, op.after)
    rows = [job.to_dict() if op.raw else job.to_plain() for job in page]
    tag = state.tagger.tag if op.tokens and state.tagger is not None else None
    for row in rows:
        row.setdefault("errors", [])  # (never failed: as the job view says it)
        lease = row.get("lease")
        if lease is not None:
            token = lease.pop("token")
            if tag is not None:
                row["lease"] = {"token": tag(token), **lease}
    return Result(view=JobsView(rows, None if cut is None else cut - 1))


def set_paused(state: QueueState, op: SetPaused, now_ms: int) -> Result:
    changed = state.paused != op.paused
    state.paused = op.paused
    return Result(changed=changed)


def configure(state: QueueState, op: Configure, now_ms: int) -> Result:
    """Change settings; ``InvalidRequest`` (changing nothing) for a bad one. The
    group settings (``group_*``) are checked together by
    :func:`broker.model.groups.settings.parse_group_settings`; a null one goes
    back to its default."""
    _check_rates(op.settings)
    merged: dict[str, Any] = {name: getattr(state.settings, name)
                              for name in state.settings.__slots__}
    merged["groups"] = _group_settings(state.settings.groups, op.settings)
    for name, value in op.settings.items():
        if name in GROUP_SETTINGS:
            continue
        try:
            merged[name] = check_setting(name, value)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
    if merged["backoff_base_s"] > merged["backoff_max_s"]:
        raise InvalidRequest(f"backoff_base_s ({merged['backoff_base_s']}) must not exceed "
                             f"backoff_max_s ({merged['backoff_max_s']})")
    if merged["groups"] != state.settings.groups:
        dissolve(state)  # (the next claim builds them again under the new settings)
        rate = parse_group_settings(merged["groups"], "configure").rate
        if rate is None:
            state.group_buckets = None  # (no rate: a later one starts every bucket full)
        elif state.group_buckets is not None:
            # the new rate from now, not from the next claim's build: the result is the
            # same whether a claim came between two changes or not
            state.group_buckets[1].reconfigure(rate, now_ms)
    state.settings = QueueSettings(**merged)
    idempotency.trim(state, now_ms)
    return Result(changed=True)


def _check_rates(changes: dict[str, Any]) -> None:
    """``InvalidRequest`` for a rate (``max_claims_per_s``, ``group_rate_per_s``)
    above 0 but below :data:`~broker.limits.MIN_RATE_PER_S`, which would never
    refill. Checked when set, not when an object is loaded (an older broker may
    have stored one: its queue still loads)."""
    for name in ("max_claims_per_s", "group_rate_per_s"):
        value = changes.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) \
                and 0 < value < MIN_RATE_PER_S:
            raise InvalidRequest(f"configure: {name} must be 0 (none) or at least "
                                 f"{MIN_RATE_PER_S:g} a second, got {value!r:.60}")


def _group_settings(current: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """The group settings as stored after ``changes`` (checked whole), or
    ``InvalidRequest``."""
    asked = {name: value for name, value in changes.items() if name in GROUP_SETTINGS}
    if not asked:
        return current
    raw = {**current, **asked}
    stored = parse_group_settings(raw, "configure").stored()
    return {name: dict(sorted(value.items())) if isinstance(value, dict) else value
            for name, value in stored.items()}  # (maps by key: the same bytes each time)


def take_over(state: QueueState, op: TakeOver, now_ms: int) -> Result:
    """Become the broker. Every claimed job gets a fresh lease on this broker's
    clock (its own length from now), whatever the expiry written on the
    previous broker's clock said: a lease that ran out while no broker
    served is renewed, not reclaimed, and clock skew never reclaims early.
    Idempotency keys and receipts are re-timed to now for the same reason."""
    previous = state.broker.id if state.broker else None
    state.broker = BrokerRecord(op.broker_id, op.url, now_ms + op.lease_ms, op.lease_ms)
    if previous != op.broker_id:
        restart_leases(state, now_ms)
        idempotency.restart(state, now_ms)  # their times were on the previous broker's clock
    return Result(changed=True)


def renew_broker(state: QueueState, op: RenewBroker, now_ms: int) -> Result:
    state.broker = BrokerRecord(op.broker_id, op.url, now_ms + op.lease_ms, op.lease_ms)
    return Result(changed=True)


def clear_broker(state: QueueState, op: ClearBroker, now_ms: int) -> Result:
    if state.broker is None or state.broker.id != op.broker_id:
        return Result()
    state.broker = None
    return Result(changed=True)
