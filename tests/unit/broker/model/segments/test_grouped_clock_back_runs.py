"""Grouped segment runs in the claims of broker.model.segments.grouped when the
owner's clock steps back: a run whose next job is not due at the earlier time
stays its group's source, so its jobs are claimed once due (a step back of 1 ms
dropped it from its group's heap, its jobs pending and never claimed until a
takeover or a settings change)."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.ops import Claim, Configure
from tests.support.group_states import LEASE_MS, T0
from tests.support.group_states import claim_groups as claim
from tests.support.segment_refs import push_grouped_segment as push_segment
from tests.support.states import new_queue


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
