"""A claim's answer names the group of each grouped job it hands out (the
jobs without one have none), a replayed claim too; within one group the
claim order is the queue's (the turns between groups: test_grouped.py)."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.ops import Claim, NewJob, Push, PushPayloads, groups_of
from tests.support.states import new_queue

T0 = 1_767_225_600_000


def test_a_claim_names_the_groups_of_its_grouped_jobs() -> None:
    state = new_queue(T0)
    T.apply(state, PushPayloads((b"0",)), T0)
    T.apply(state, Push((NewJob(b"1", group="a"), NewJob(b"2"), NewJob(b"3", group="b"))), T0)
    out = T.apply(state, Claim("w", 10, 30_000), T0).jobs
    assert [job.id for job in out] == ["j0000000001", "j0000000002", "j0000000003",
                                       "j0000000004"]  # (one answer: in claim order)
    assert groups_of(out) == {1: "a", 3: "b"}


def test_a_claim_of_ungrouped_jobs_names_none() -> None:
    state = new_queue(T0)
    T.apply(state, Push((NewJob(b"1", priority=1), NewJob(b"2"))), T0)
    out = T.apply(state, Claim("w", 10, 30_000), T0).jobs
    assert len(out) == 2 and groups_of(out) == {}


def test_one_group_keeps_the_claim_order() -> None:
    plain, grouped = new_queue(T0), new_queue(T0)
    jobs = [(b"%d" % i, i % 3) for i in range(9)]
    T.apply(plain, Push(tuple(NewJob(p, priority=pr) for p, pr in jobs)), T0)
    T.apply(grouped, Push(tuple(NewJob(p, priority=pr, group="g") for p, pr in jobs)), T0)
    a = T.apply(plain, Claim("w", 5, 30_000), T0).jobs
    b = T.apply(grouped, Claim("w", 5, 30_000), T0).jobs
    assert [j.id for j in a] == [j.id for j in b]


def test_a_replayed_claim_names_the_groups_again() -> None:
    state = new_queue(T0)
    T.apply(state, Push((NewJob(b"1"), NewJob(b"2", group="a"))), T0)
    first = T.apply(state, Claim("w", 2, 30_000, request="r-1"), T0)
    again = T.apply(state, Claim("w", 2, 30_000, request="r-1"), T0 + 1)
    assert again.replayed
    assert [j.token for j in again.jobs] == [j.token for j in first.jobs]
    assert groups_of(again.jobs) == groups_of(first.jobs) == {1: "a"}
