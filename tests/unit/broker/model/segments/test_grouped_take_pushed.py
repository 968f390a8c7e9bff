"""A grouped bulk push's jobs go straight into their groups' heaps
(broker.model.segments.group_heaps.take_pushed, through grouped; dispatch told at the next claim)
and claims answer as when they went through the ready heap (grouped._absorb):
twin queues under the same random steps (bulk pushes into groups, mixed with
ungrouped jobs, jobs with options; claims; completions; failures retried;
cancels; stats; limit and weight changes; the clock forwards and back, and
reclaims; takeovers), one with take_pushed off, answer for answer, with every
group's record in dispatch the same after each step, and their heads encode to
the same bytes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.model import transitions as T
from broker.model import views
from broker.model.ops import Claim, Configure, NewJob, Push, groups_of
from broker.model.state import QueueState
from tests.support.group_twins import LEASE_MS, Step, dispatch_records, run_twins
from tests.support.states import new_queue
from tests.support.tiers import examples

T0 = 1_767_225_600_000
GROUPS = [None, "a", "b", "c", "d", "e"]

bulk_st = st.tuples(st.just("push"), st.lists(
    st.tuples(st.sampled_from(GROUPS[1:]), st.just(0), st.just(0)), min_size=1, max_size=12))
mixed_st = st.tuples(st.just("push"), st.lists(
    st.tuples(st.sampled_from(GROUPS), st.sampled_from([0, 0, 0, 0, 1]),
              st.sampled_from([0, 0, 0, 0, 2_000])), min_size=1, max_size=12))
step_st = st.one_of(
    bulk_st, bulk_st, bulk_st, mixed_st,
    st.tuples(st.just("claim"), st.integers(1, 12)),
    st.tuples(st.just("claim"), st.integers(1, 12)),
    st.tuples(st.just("claim"), st.integers(1, 3)),
    st.tuples(st.just("complete"), st.integers(0, 30)),
    st.tuples(st.just("fail"), st.integers(0, 30)),
    st.tuples(st.just("cancel"), st.integers(1, 40)),
    st.tuples(st.just("cancel"), st.integers(1, 40)),
    st.tuples(st.just("stats"), st.just(0)),
    st.tuples(st.just("configure"), st.sampled_from([
        {}, {"group_limit": 1}, {"group_limit": 2}, {"group_weights": {"a": 3}}])),
    st.tuples(st.just("clock"), st.sampled_from([1, 1_000, 2_500, LEASE_MS + 1])),
    st.tuples(st.just("clock"), st.sampled_from([-1, -1_500])),
    st.tuples(st.just("clock"), st.sampled_from([-1, -1_500])),
    st.tuples(st.just("takeover"), st.just(0)),
)


def _twins(steps: list[tuple[str, Any]]) -> None:
    """Run ``steps`` on twin queues, take_pushed on in one and off in the other:
    the same answers, dispatch records and encoded heads (the clock steps move
    ``now``: forwards or back)."""
    direct, through = new_queue(T0), new_queue(T0)
    for state in (direct, through):  # (a claim made the groups: pushes may skip the ready heap)
        T.apply(state, Configure({"group_limit": 3}), T0)
        T.apply(state, Push(tuple(NewJob(b"0", group=g) for g in GROUPS)), T0)
        T.apply(state, Claim("w", 1, LEASE_MS), T0)

    def through_the_ready_heap(patch: pytest.MonkeyPatch) -> None:
        patch.setattr(T, "take_pushed", lambda state, pushed, now_ms: None)

    def check(direct: QueueState, through: QueueState, now: int, step: Step) -> None:
        assert dispatch_records(direct, GROUPS) == dispatch_records(through, GROUPS), step
        assert _wakes(direct, now) == _wakes(through, now), step
        if not (direct.groups and direct.groups.untold):  # (told: as through the ready heap)
            assert _tops(direct) == _tops(through), step

    run_twins((direct, through), steps, T0, through_the_ready_heap, check)


def _wakes(state: QueueState, now: int) -> tuple[bool, int | None]:
    """Whether the broker wakes waiting claims (ServedQueue.notify's test) and the
    state's next wake-up."""
    ready = bool(state.ready) or (state.groups is not None and state.groups.runnable(now))
    return ready, views.next_wakeup_ms(state, now)


def _tops(state: QueueState) -> tuple[list[Any], list[int]]:
    """Each group's heap top by name (what dispatch is told), and the delayed heap."""
    groups = state.groups
    if groups is None:
        return [], sorted(state.delayed)
    # (a name not interned has no heap: a push interns its groups' names, the ready
    # heap's way at the claim after, and not for a job that was no longer due then)
    return [(name, heap[0] if heap else None) for name in GROUPS
            for gid in [groups.names.find(name)]
            for heap in [None if gid is None else groups.heaps.get(gid)]], sorted(state.delayed)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step_st, min_size=8, max_size=40))
def test_pushes_into_group_heaps_answer_as_through_the_ready_heap(
        steps: list[tuple[str, Any]]) -> None:
    _twins(steps)


@pytest.mark.parametrize("steps", [
    # group a's pushed top cancelled before the claim that tells its head
    [("claim", 12), ("push", [("a", 0, 0)] * 3), ("cancel", 7), ("stats", 0), ("claim", 1),
     ("claim", 12)],
    # the clock stepped back between a push and the claim after it
    [("clock", 2_000), ("claim", 12), ("clock", 2_000), ("push", [("a", 0, 0), ("b", 0, 0)]),
     ("clock", -1_500), ("stats", 0), ("claim", 12), ("clock", 1_500), ("claim", 12)],
    # a reclaim after a push into untold groups: c told first at the pushed job's
    # priority, then at its reclaimed one's, its pass caught up at a priority it never
    # competed at (c served twice, a's pass wrong)
    [("push", [("a", 0, 0)]), ("push", [("c", 1, 0)]), ("claim", 6), ("push", [("c", 0, 0)]),
     ("complete", 1), ("push", [("a", 0, 0)]), ("clock", LEASE_MS + 1), ("claim", 3)],
    # a group pushed into after the clock stepped back, then back again: its job no
    # longer due when told (its name interned by the push only)
    [("claim", 1), ("claim", 1), ("clock", -1), ("push", [(None, 0, 0), (None, 0, 0)]),
     ("claim", 1), ("push", [("c", 0, 0)]), ("clock", -1), ("stats", 0)],
], ids=["cancelled-top", "clock-back", "reclaim-after-push", "pushed-then-not-due"])
def test_pushed_jobs_no_longer_due_or_live_are_told_as_through_the_ready_heap(
        steps: list[tuple[str, Any]]) -> None:
    _twins(steps)


def test_a_bulk_push_into_known_groups_skips_the_ready_heap() -> None:
    """The switch the test above turns: once the queue's groups exist, a bulk
    push of grouped jobs leaves the ready heap empty (its jobs are in their
    groups' heaps, dispatch told at the next claim); a push with an ungrouped
    job, or one with options, goes through the ready heap."""
    state = new_queue(T0)
    T.apply(state, Push((NewJob(b"1", group="a"),)), T0)
    T.apply(state, Claim("w", 1, LEASE_MS), T0)
    assert state.groups is not None and not state.ready
    T.apply(state, Push((NewJob(b"2", group="a"), NewJob(b"3", group="b"))), T0)
    assert not state.ready and state.groups.untold
    assert state.groups.runnable(T0)
    out = T.apply(state, Claim("w", 2, LEASE_MS), T0).jobs
    assert groups_of(out) == {0: "a", 1: "b"} and not state.groups.untold
    for jobs in ((NewJob(b"4", group="a"), NewJob(b"5")), (NewJob(b"6", group="a", priority=1),)):
        T.apply(state, Push(jobs), T0)
        assert state.ready
        T.apply(state, Claim("w", 5, LEASE_MS), T0)
