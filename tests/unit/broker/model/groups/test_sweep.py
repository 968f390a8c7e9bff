"""Releasing unreferenced group names (broker.model.groups.sweep), through the
transitions: a long-lived broker meeting new groups all the time keeps a names
table bounded by the groups still referenced, never every group ever seen; and
a released gid, reused, carries nothing of its former group."""

from __future__ import annotations

from typing import Any

from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.directories import group_major
from broker.model.groups.sweep import FLOOR, referenced, release_unused
from broker.model.job import DEAD
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    Configure,
    Fail,
    FailItem,
    NewJob,
    Purge,
    Push,
    PushPayloads,
    Reserve,
)
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.group_states import LEASE_MS, T0, claim_groups
from tests.support.states import QUEUE, new_queue

ROUNDS, PER_ROUND = 200, 100  # (20,000 groups, each pushed, claimed and settled once)
#: What the table may hold after the rounds: the floor, and a round's groups past it.
BOUND = FLOOR + PER_ROUND


def queue(**group_settings: Any) -> QueueState:
    state = new_queue(T0)
    T.apply(state, Configure(group_settings), T0)
    return state


def push_claim(state: QueueState, first: int, now: int, **job: Any) -> list[Any]:
    T.apply(state, Push(tuple(NewJob(b"1", group=f"tenant-{first + i}", **job)
                              for i in range(PER_ROUND))), now)
    got = list(T.apply(state, Claim("w", PER_ROUND, LEASE_MS), now).jobs)
    assert len(got) == PER_ROUND
    return got


def complete(state: QueueState, got: list[Any], now: int) -> None:
    T.apply(state, Complete(tuple(CompleteItem(j.token, b"1") for j in got)), now)


def names_of(state: QueueState) -> int:
    assert state.groups is not None
    return len(state.groups.names)


def test_fair_groups_that_come_and_go_keep_the_table_bounded() -> None:
    state = queue()
    for r in range(ROUNDS):
        complete(state, push_claim(state, r * PER_ROUND, T0 + r), T0 + r)
    assert names_of(state) <= BOUND  # (20,000 before)


def test_limited_groups_that_come_and_go_keep_the_table_bounded() -> None:
    state = queue(group_limit=2)
    for r in range(ROUNDS):
        complete(state, push_claim(state, r * PER_ROUND, T0 + r), T0 + r)
    assert names_of(state) <= BOUND


def test_fifo_groups_held_by_a_dead_job_keep_their_id_until_it_is_purged() -> None:
    state = queue(group_order="fifo", group_dead="hold")
    for r in range(ROUNDS):
        got = push_claim(state, r * PER_ROUND, T0 + r, max_attempts=1)
        T.apply(state, Fail(tuple(FailItem(j.token, "boom") for j in got)), T0 + r)
        if r % 10 == 9:
            T.apply(state, Purge((DEAD,)), T0 + r)
    assert names_of(state) <= BOUND
    # a group still holding a dead job holds its jobs back, however many sweeps ran
    T.apply(state, Push((NewJob(b"1", group="held", max_attempts=1),)), T0 + ROUNDS)
    [job] = T.apply(state, Claim("w", 1, LEASE_MS), T0 + ROUNDS).jobs
    T.apply(state, Fail((FailItem(job.token, "boom"),)), T0 + ROUNDS)
    for r in range(ROUNDS, ROUNDS + 50):
        complete(state, push_claim(state, r * PER_ROUND, T0 + r), T0 + r)
    T.apply(state, Push((NewJob(b"2", group="held"),)), T0 + 10**6)
    assert claim_groups(state, 10, T0 + 10**6) == {}
    assert state.groups is not None and state.groups.names.find("held") is not None


def test_groups_with_per_group_rates_keep_the_table_bounded_and_no_fresh_burst() -> None:
    state = queue(group_rate_per_s=1000, group_burst=1)  # (a bucket refills in 1 ms)
    for r in range(ROUNDS):
        now = T0 + 10 * r
        complete(state, push_claim(state, r * PER_ROUND, now), now)
    assert names_of(state) <= BOUND
    # a bucket short of full survives every sweep: no group is handed a fresh burst
    slow = queue(group_rate_per_s=0.001, group_burst=1)  # (one token in 1,000 s)
    T.apply(slow, Push((NewJob(b"1", group="slow"),)), T0)
    [job] = T.apply(slow, Claim("w", 1, LEASE_MS), T0).jobs
    complete(slow, [job], T0)  # ("slow" has no job left, only its bucket, short of full)
    for r in range(1, 60):
        complete(slow, push_claim(slow, r * PER_ROUND, T0 + r), T0 + r)
    assert slow.groups is not None
    assert slow.groups.names.cap > FLOOR  # (a sweep ran; every bucket short of full kept)
    T.apply(slow, Push((NewJob(b"2", group="slow"),)), T0 + 100)
    assert claim_groups(slow, 10, T0 + 100) == {}  # (no token until T0 + 1,000 s)


def test_grouped_segments_that_come_and_go_keep_the_table_and_directories_bounded() -> None:
    state = queue()
    windows = SegmentWindows()
    state.windows = windows
    for r in range(ROUNDS):
        now = T0 + r
        groups = [f"tenant-{r * PER_ROUND + i}" for i in range(PER_ROUND)]
        first = T.apply(state, Reserve(PER_ROUND, 8), now).ids.first
        gm = group_major([b"1"] * PER_ROUND, groups)
        assert gm.runs is not None
        data = encode_segment(QUEUE, first, 0, now, gm.payloads, max_attempts=3, groups=gm.runs)
        ref = SegmentRef(segment_key(QUEUE, segment_name(first, "0123abcd")), f'"e{first}"',
                         first, PER_ROUND, 0, now, groups=len(gm.runs))
        T.apply(state, PushPayloads((), refs=(ref,)), now)
        windows.put_grouped(ref, segment_lines(data, ref), gm.runs)
        got = list(T.apply(state, Claim("w", PER_ROUND, LEASE_MS), now).jobs)
        assert len(got) == PER_ROUND
        complete(state, got, now)
    assert names_of(state) <= BOUND
    assert state.groups is not None and len(state.groups.dirs) <= 1 + FLOOR // PER_ROUND


def test_a_sweep_releases_exactly_the_unreferenced_ids() -> None:
    state = queue(group_limit=1)
    T.apply(state, Push(tuple(NewJob(b"1", group=g) for g in ["a", "a", "b", "c"])), T0)
    got = list(T.apply(state, Claim("w", 2, LEASE_MS), T0).jobs)  # (one of a, one of b)
    groups = state.groups
    assert groups is not None
    complete(state, [j for j in got if state.jobs[int(j.id[1:])].group == "b"], T0)
    assert release_unused(groups, ()) == 1  # ("b": no job, record or heap left)
    assert groups.names.find("b") is None
    assert {groups.names.name(gid) for gid in referenced(groups)} == {None, "a", "c"}
    assert release_unused(groups, ()) == 0
    assert groups.names.cap == FLOOR
    gid_b = 2  # (interned second; "d" takes it, the last freed)
    T.apply(state, Push((NewJob(b"1", group="d"),)), T0)
    assert state.groups is groups and groups.names.find("d") == gid_b
    assert claim_groups(state, 10, T0) == {"c": 1, "d": 1}  # ("a" at its limit)
    assert groups.held("d") == 1 and groups.held("a") == 1
