"""A grouped claim's answer names the group of each of its grouped jobs by index
(``LeasedJobs.groups``, set by broker.model.segments.grouped.claim_grouped from
the seqs it picked, in the order it answers them): under random pushes (grouped
and ungrouped jobs, priorities, delays, jobs pushed one by one or in bulk),
claims, completions, failures and reclaims, in fair and fifo order, with and
without a limit, every answer's groups are those its jobs have in the head
(read by their ids, as transitions._named_groups reads them), and a claim that
answers no grouped job names none."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.model import transitions as T
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    Configure,
    Fail,
    FailItem,
    LeasedJobs,
    NewJob,
    Push,
    Reclaim,
    groups_of,
)
from broker.model.state import QueueState
from tests.support.states import new_queue

T0 = 1_767_225_600_000
LEASE_MS = 5_000

job_st = st.tuples(st.sampled_from([None, "a", "b", "c", "d"]), st.sampled_from([0, 0, 0, 1, 2]),
                   st.sampled_from([0, 0, 0, 1_000]))
step_st = st.one_of(
    st.tuples(st.just("push"), st.lists(job_st, min_size=1, max_size=10)),
    st.tuples(st.just("push"), st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.just(0),
                                                  st.just(0)), min_size=1, max_size=10)),
    st.tuples(st.just("claim"), st.integers(1, 10)),
    st.tuples(st.just("claim"), st.integers(1, 10)),
    st.tuples(st.just("complete"), st.integers(0, 30)),
    st.tuples(st.just("fail"), st.integers(0, 30)),
    st.tuples(st.just("clock"), st.sampled_from([500, LEASE_MS + 1])),
)


def _groups_by_id(state: QueueState, out: LeasedJobs) -> dict[int, str]:
    named = {}
    for i, job_id in enumerate(out.ids):
        job = state.jobs.get(int(job_id[1:]))
        assert job is not None
        if job.group is not None:
            named[i] = job.group
    return named


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.sampled_from([{}, {"group_limit": 2}, {"group_order": "fifo"},
                              {"group_weights": {"a": 3}}]),
       steps=st.lists(step_st, min_size=4, max_size=30))
def test_a_grouped_claim_names_its_jobs_groups_as_the_head_holds_them(
        order: dict[str, Any], steps: list[tuple[str, Any]]) -> None:
    state = new_queue(T0)
    T.apply(state, Configure(order), T0)
    now = T0
    tokens: list[str] = []
    for kind, arg in steps:
        if kind == "push":
            T.apply(state, Push(tuple(NewJob(b"%d" % i, group=g, priority=p, delay_ms=d)
                                      for i, (g, p, d) in enumerate(arg))), now)
        elif kind == "claim":
            out = T.apply(state, Claim("w", arg, LEASE_MS), now).jobs
            assert isinstance(out, LeasedJobs)
            assert groups_of(out) == _groups_by_id(state, out)
            tokens.extend(out.tokens)
        elif kind in ("complete", "fail") and tokens:
            token = tokens.pop(arg % len(tokens))
            T.apply(state, Complete((CompleteItem(token),)) if kind == "complete" else
                    Fail((FailItem(token, "boom", retry_in_ms=0),)), now)
        elif kind == "clock":
            now += arg
            T.apply(state, Reclaim(), now)


def test_a_claim_of_ungrouped_jobs_in_a_grouped_queue_names_no_group() -> None:
    state = new_queue(T0)
    T.apply(state, Push((NewJob(b"1", group="a"), NewJob(b"2"), NewJob(b"3", priority=1))), T0)
    out = T.apply(state, Claim("w", 3, LEASE_MS), T0).jobs
    assert out.ids == ["j0000000003", "j0000000001", "j0000000002"]
    assert groups_of(out) == {1: "a"}
    T.apply(state, Push((NewJob(b"4"),)), T0)
    assert groups_of(T.apply(state, Claim("w", 1, LEASE_MS), T0).jobs) == {}
