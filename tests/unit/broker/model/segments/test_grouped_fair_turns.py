"""A grouped claim's turns in one call (broker.model.segments.grouped: fair order,
no per-group rate, no segment, through Dispatch.serve_turns) hand out the same
jobs, in the same order, as the claim's loop of pick and served: twin queues
under the same random steps (pushes into groups, as lines and as jobs, with
priorities and delays; claims; completions; failures retried; cancels; limit
and weight changes; the clock and reclaims; takeovers), one claiming with the
loop, answer for answer, with every group's record in dispatch (held count,
pass, head) the same after each step, and their heads encode to the same bytes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker.model import transitions as T
from broker.model.ops import Claim, Configure, NewJob, Push
from broker.model.segments import grouped
from broker.model.state import QueueState
from tests.support.group_twins import LEASE_MS, Step, dispatch_records, run_twins
from tests.support.states import new_queue

T0 = 1_767_225_600_000
GROUPS = [None, "a", "b", "c", "d", "e"]

push_st = st.tuples(st.just("push"), st.lists(
    st.tuples(st.sampled_from(GROUPS), st.sampled_from([0, 0, 0, 1, 4]),
              st.sampled_from([0, 0, 0, 0, 2_000])), min_size=1, max_size=12))
step_st = st.one_of(
    push_st, push_st,
    st.tuples(st.just("claim"), st.integers(1, 12)),
    st.tuples(st.just("claim"), st.integers(1, 3)),
    st.tuples(st.just("complete"), st.integers(0, 30)),
    st.tuples(st.just("fail"), st.integers(0, 30)),
    st.tuples(st.just("cancel"), st.integers(1, 40)),
    st.tuples(st.just("configure"), st.sampled_from([
        {}, {"group_limit": 1}, {"group_limit": 2}, {"group_weights": {"a": 3}},
        {"group_limit": 2, "group_weights": {"b": 2}}])),
    st.tuples(st.just("clock"), st.sampled_from([1, 1_000, 2_500, LEASE_MS + 1])),
    st.tuples(st.just("takeover"), st.just(0)),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(steps=[  # (a stale key behind the head, inside a turn of two: skipped, not taken)
    ("push", [("a", 0, 0)] * 4), ("claim", 1), ("cancel", 3), ("claim", 3)])
@given(steps=st.lists(step_st, min_size=1, max_size=40))
def test_claims_in_bulk_answer_as_the_loop_of_turns(steps: list[tuple[str, Any]]) -> None:
    bulk, loop = new_queue(T0), new_queue(T0)
    for state in (bulk, loop):
        T.apply(state, Configure({"group_limit": 3}), T0)

    def by_loop(patch: pytest.MonkeyPatch) -> None:
        patch.setattr(grouped, "in_bulk", lambda state, groups: False)

    def check(bulk: QueueState, loop: QueueState, now: int, step: Step) -> None:
        assert dispatch_records(bulk, GROUPS) == dispatch_records(loop, GROUPS)

    run_twins((bulk, loop), steps, T0, by_loop, check)


def test_the_loop_is_what_the_twin_claims_with() -> None:
    """The switch the test above turns: a fair queue without rates or segments
    claims in bulk, one with a per-group rate or in fifo order by the loop."""
    state = new_queue(T0)
    T.apply(state, Push((NewJob(b"1", group="a"),)), T0)
    T.apply(state, Claim("w", 1, LEASE_MS), T0)
    assert state.groups is not None and grouped.in_bulk(state, state.groups)
    for settings_ in ({"group_rate_per_s": 5}, {"group_order": "fifo"}):
        other = new_queue(T0)
        T.apply(other, Configure(settings_), T0)
        T.apply(other, Push((NewJob(b"1", group="a"),)), T0)
        T.apply(other, Claim("w", 1, LEASE_MS), T0)
        assert other.groups is not None and not grouped.in_bulk(other, other.groups)
