"""Grouped segment runs in broker.model.segments.grouped when the owner's clock
steps back between a claim and another step that registers or refreshes the
groups' heaps: a stats read (``group_stats``) or a cancel of a segment's job
(``taken_out``). A run put in its group's heap at the later time must stay its
group's source when a claim or cancel comes at the earlier time, so its jobs
are claimed once due (on main such a run was dropped from its group's heap at
the earlier time and its jobs stayed pending, never claimed, until a
takeover or a settings change)."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    Configure,
    NewJob,
    Push,
    ReadStats,
)
from tests.support.group_states import LEASE_MS, T0
from tests.support.segment_refs import push_grouped_segment as push_segment
from tests.support.states import new_queue

DUE = T0 + 1_000  # (the segment's jobs are due then)
LATER = T0 + 2_000  # (a step at this time, then the clock steps back)


def ids(jobs: object) -> list[int]:
    return sorted(int(i[1:]) for i in jobs.ids)  # type: ignore[attr-defined]


def test_a_stats_read_ahead_of_a_claim_strands_no_segment_run() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 5}), T0)
    assert ids(T.apply(state, Claim("w", 5, LEASE_MS), T0).jobs) == []
    first = push_segment(state, ["a", "a", "b"], DUE)
    assert T.apply(state, ReadStats(), LATER).view["counts"]["pending"] == 3
    # the clock steps back: the segment is not due yet
    assert ids(T.apply(state, Claim("w", 5, LEASE_MS), T0 + 1).jobs) == []
    got = T.apply(state, Claim("w", 5, LEASE_MS), LATER + 1_000).jobs
    assert ids(got) == [first, first + 1, first + 2]
    assert T.apply(state, ReadStats(), LATER + 1_000).view["counts"]["pending"] == 0


def test_a_cancel_on_a_stepped_back_clock_strands_no_segment_run() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 1}), T0)
    T.apply(state, Push((NewJob(b"0", group="a"),)), T0)
    first = push_segment(state, ["a", "a", "a"], DUE)
    held = T.apply(state, Claim("w", 5, LEASE_MS), LATER).jobs  # (group a at its limit)
    assert ids(held) == [1]
    # the clock steps back: the run's first job is cancelled before the run is due
    [answer] = T.apply(state, Cancel((f"j{first:010d}",)), T0 + 1).view
    assert answer.ok
    assert T.apply(state, Complete((CompleteItem(held.tokens[0]),)), LATER + 500).items[0].ok
    assert ids(T.apply(state, Claim("w", 5, LEASE_MS), LATER + 1_000).jobs) == [first + 1]
    counts = T.apply(state, ReadStats(), LATER + 1_000).view["counts"]
    assert (counts["pending"], counts["claimed"], counts["cancelled"]) == (1, 1, 1)
