"""Twin grouped queues under the same random steps, one of them with a switch
turned (a claim's turns in one call or by its loop; pushes into the groups'
heaps or through the ready heap): run by
tests/unit/broker/model/segments/test_grouped_fair_turns.py and
test_grouped_take_pushed.py.

A step is ``(kind, arg)``: ``push`` [(group, priority, delay in ms)], ``claim``
n, ``complete``/``fail`` (a live token by index, failures retried at once),
``cancel`` seq, ``stats``, ``configure`` settings, ``clock`` ms (moves ``now``,
then reclaims), ``takeover`` (both heads committed and read back, a
millisecond later)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from broker.model import ops
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.segments import grouped
from broker.model.state import QueueState
from tests.support.states import committed

Step = tuple[str, Any]
LEASE_MS = 5_000


def apply_step(state: QueueState, step: Step, now: int, tokens: list[str]) -> Any:
    """Apply one step (not ``takeover``: see :func:`run_twins`) to ``state`` at
    ``now``; what it answered (compared between the twins). ``tokens``: the
    live leases, those claimed added, those settled taken out."""
    kind, arg = step
    if kind == "push":
        jobs = tuple(ops.NewJob(b"%d" % i, priority=p, delay_ms=d, group=g)
                     for i, (g, p, d) in enumerate(arg))
        return T.apply(state, ops.Push(jobs), now).ids
    if kind == "claim":
        out = T.apply(state, ops.Claim("w", arg, LEASE_MS), now).jobs
        tokens.extend(job.token for job in out)
        return [job.id for job in out], ops.groups_of(out)
    if kind in ("complete", "fail") and tokens:
        token = tokens.pop(arg % len(tokens))
        op = ops.Complete((ops.CompleteItem(token),)) if kind == "complete" else \
            ops.Fail((ops.FailItem(token, "boom", retry_in_ms=0),))
        return T.apply(state, op, now).items[0].ok
    if kind == "cancel":
        return T.apply(state, ops.Cancel((f"j{arg:010d}",)), now).view
    if kind == "stats":
        stats = grouped.group_stats(state, now)
        return None if stats is None else {k: v for k, v in stats.items() if k != "busiest"}
    if kind == "configure":
        return T.apply(state, ops.Configure(arg), now).changed
    if kind == "clock":
        return T.apply(state, ops.Reclaim(), now).count
    return None


def run_twins(twins: tuple[QueueState, QueueState], steps: Sequence[Step], now: int,
              switch: Callable[[pytest.MonkeyPatch], None],
              check: Callable[[QueueState, QueueState, int, Step], None]) -> None:
    """Run ``steps`` on both twins from ``now``, the second with ``switch``
    applied: the same answers (``AssertionError`` naming the step), then
    ``check(first, second, now, step)`` after each step; at the end, the same
    encoded heads."""
    first, second = twins
    first_tokens: list[str] = []
    second_tokens: list[str] = []
    for step in steps:
        if step[0] == "clock":
            now += step[1]
        if step[0] == "takeover":
            now += 1
            first, second = committed(first, now), committed(second, now)
            continue
        answer = apply_step(first, step, now, first_tokens)
        with pytest.MonkeyPatch.context() as patch:
            switch(patch)
            assert apply_step(second, step, now, second_tokens) == answer, step
        check(first, second, now, step)
    assert encoded(first, now) == encoded(second, now)


def dispatch_records(state: QueueState, names: Sequence[str | None]) -> list[Any]:
    """Each of ``names``' record in dispatch (state, held, pass, head...)."""
    groups = state.groups
    if groups is None:
        return []
    return [(name, None if gid is None else groups.dispatch.view(gid))
            for name in names for gid in [groups.names.find(name)]]


def encoded(state: QueueState, now: int) -> bytes:
    """The head's bytes as committed by ``w`` at ``now``."""
    codec.stamp(state, "w", now, "c-1")
    return b"".join(codec.encode_parts(state))
