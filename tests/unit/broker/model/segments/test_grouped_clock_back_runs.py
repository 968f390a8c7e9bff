"""Grouped segment runs in the claims of broker.model.segments.grouped when the
owner's clock steps back: a run whose next job is not due at the earlier time
stays its group's source, so its jobs are claimed once due (a step back of 1 ms
dropped it from its group's heap, its jobs pending and never claimed until a
takeover or a settings change)."""

from __future__ import annotations

from collections import Counter

from broker.model import transitions as T
from broker.model.ops import (
    Claim,
    Configure,
)
from broker.model.state import QueueState
from tests.support.segment_refs import push_grouped_segment as push_segment
from tests.support.states import new_queue

T0 = 1_767_225_600_000
LEASE_MS = 600_000


def claim(state: QueueState, n: int, now: int) -> Counter[str | None]:
    got = T.apply(state, Claim("w", n, LEASE_MS), now).jobs
    return Counter(state.jobs[int(job.id[1:])].group for job in got)


def test_a_clock_stepped_back_1_ms_strands_no_fair_segment_run() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 5}), T0)
    first = push_segment(state, ["a", "a", "a"], T0)  # (due at T0)
    got = T.apply(state, Claim("w", 1, LEASE_MS), T0).jobs
    assert [int(j.id[1:]) for j in got] == [first]
    assert claim(state, 5, T0 - 1) == {}  # (the segment's jobs are due at T0)
    got = T.apply(state, Claim("w", 5, LEASE_MS), T0 + 10).jobs
    assert sorted(int(j.id[1:]) for j in got) == [first + 1, first + 2]
    assert not state.segment_refs
