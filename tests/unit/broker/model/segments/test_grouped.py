"""Claims of a queue that uses groups (broker.model.segments.grouped): a group
at its limit is skipped and the claim takes the next eligible job; groups of
one priority are served in turn (weights), oldest first within a group;
priority first; jobs without a group are one group; the held counts are
decremented by every settlement and rebuilt from a decoded head."""

from __future__ import annotations

from typing import Any

import pytest

from broker.errors import InvalidRequest
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.counts import held_by_group
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    Configure,
    Fail,
    FailItem,
    NewJob,
    Push,
    ReadStats,
    Reclaim,
    Release,
    TakeOver,
)
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import committed, new_queue

T0 = 1_767_225_600_000


def queue(groups: list[str | None], **settings: Any) -> QueueState:
    state = new_queue(T0)
    if settings:
        T.apply(state, Configure(settings), T0)
    T.apply(state, Push(tuple(NewJob(b"%d" % i, group=g) for i, g in enumerate(groups))), T0)
    return state


def claim(state: QueueState, n: int, now: int = T0) -> list[Any]:
    return list(T.apply(state, Claim("w", n, 30_000), now).jobs)


def seqs(jobs: list[Any]) -> list[int]:
    return [int(job.id[1:]) for job in jobs]


def held(state: QueueState) -> dict[str | None, int]:
    return held_by_group(state.claim_records.values(), state.jobs)


def test_a_group_at_its_limit_is_skipped_for_the_next_eligible_job() -> None:
    state = queue(["a"] * 5 + ["b"] * 3 + [None], group_limit=2)
    got = claim(state, 10)
    assert sorted(seqs(got)) == [1, 2, 6, 7, 9]  # two of a, two of b, the ungrouped one
    assert held(state) == {"a": 2, "b": 2, None: 1}
    assert claim(state, 10) == []  # a and b at their limit: nothing else is eligible
    T.apply(state, Complete((CompleteItem(got[0].token),)), T0)
    assert seqs(claim(state, 10)) == [3]  # a's place freed: its oldest pending job


def test_group_limits_override_the_limit_and_null_is_unlimited() -> None:
    state = queue(["a"] * 4 + ["b"] * 4 + ["c"] * 2,
                  group_limit=1, group_limits={"a": None, "c": 0})
    got = claim(state, 20)
    assert sorted(seqs(got)) == [1, 2, 3, 4, 5]  # a unlimited, b one, c paused (0)
    assert held(state) == {"a": 4, "b": 1}


def test_groups_of_one_priority_are_served_in_turn_oldest_first() -> None:
    state = queue(["a"] * 3 + ["b"] * 3 + [None] * 3)
    order = [seqs(claim(state, 1))[0] for _ in range(9)]
    assert order == [1, 4, 7, 2, 5, 8, 3, 6, 9]


def test_weights_give_a_group_more_turns() -> None:
    state = queue(["a"] * 8 + ["b"] * 8, group_weights={"a": 3})
    order = [seqs(claim(state, 1))[0] for _ in range(8)]
    groups = ["a" if seq <= 8 else "b" for seq in order]
    assert groups == ["a", "b", "a", "a", "a", "b", "a", "a"]  # three of a per one of b


def test_priority_comes_before_turns() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 5}), T0)
    T.apply(state, Push((NewJob(b"1", group="a"), NewJob(b"2", group="a", priority=5),
                         NewJob(b"3", group="b"), NewJob(b"4", group="b", priority=3))), T0)
    assert seqs(claim(state, 4)) == [2, 4, 1, 3]


def test_one_turn_never_mixes_priorities() -> None:
    state = new_queue(T0)
    jobs = [NewJob(b"1", group="a", priority=5), *[NewJob(b"x", group="a")] * 3,
            NewJob(b"5", group="b", priority=3)]
    T.apply(state, Push(tuple(jobs)), T0)
    assert seqs(claim(state, 5)) == [1, 5, 2, 3, 4]


def test_every_settlement_frees_a_place() -> None:
    state = queue(["a"] * 6, group_limit=2)
    first = claim(state, 10)
    assert seqs(first) == [1, 2] and claim(state, 10) == []
    T.apply(state, Fail((FailItem(first[0].token, "boom", retry_in_ms=0),)), T0)
    again = claim(state, 10)
    assert seqs(again) == [1]  # the retried job is due again, the oldest of a
    T.apply(state, Release((again[0].token,)), T0)
    assert seqs(claim(state, 10)) == [1]
    assert held(state) == {"a": 2}
    T.apply(state, Reclaim(), T0 + 60_000)  # both leases ran out
    assert held(state) == {}
    assert len(claim(state, 10, T0 + 60_000)) == 2


def test_the_counts_are_rebuilt_from_a_decoded_head_across_a_takeover() -> None:
    state = queue(["a"] * 4 + ["b"], group_limit=2)
    got = claim(state, 2)
    assert seqs(got) == [1, 5] and held(state) == {"a": 1, "b": 1}
    claim(state, 1)
    before = held(state)
    loaded = committed(state, T0)
    T.apply(loaded, TakeOver("b-2", "http://b-2", 30_000), T0 + 1)
    assert held(loaded) == before
    more = claim(loaded, 10, T0 + 1)
    after = held(loaded)
    assert after["a"] == 2 and all(n <= 2 for n in after.values())
    assert len(more) == sum(after.values()) - sum(before.values())
    assert loaded.groups is not None and loaded.groups.held("a") == 2


def test_a_queue_with_group_settings_is_written_as_version_6_and_back() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 2, "group_weights": {"z": 2, "y": 3}}), T0)
    data = b"".join(codec.encode_parts(state))
    assert b'"version":6' in data
    assert b'"group_weights":{"y":3,"z":2}' in data  # (a map's keys in order)
    T.apply(state, Configure({"group_limit": None, "group_weights": None}), T0)
    assert b'"version":5' in b"".join(codec.encode_parts(state))
    assert "group_limit" not in state.settings.stored()


@pytest.mark.parametrize("settings, says", [
    ({"group_limit": -1}, "group_limit"),
    ({"group_limit": 1.5}, "group_limit"),
    ({"group_limit": True}, "group_limit"),
    ({"group_limits": {"a": "x"}}, "group_limits"),
    ({"group_limits": ["a"]}, "group_limits"),
    ({"group_limits": {"": 2}}, "group_limits"),
    ({"group_weights": {"a": 0}}, "group_weights"),
    ({"group_weights": {"a": None}}, "group_weights"),
    ({"group_order": "fifo"}, "group_order fifo allows one claimed job per group; group_limit"),
    ({"group_order": "lifo"}, "group_order"),
    ({"group_dead": "drop"}, "group_dead"),
    ({"group_rate_per_s": -1}, "group_rate_per_s"),
    ({"group_burst": 1.5}, "group_burst"),
    ({"group_rate_per_s": -5}, "group_rate_per_s"),
    ({"group_rate_per_s": 1e-7}, "group_rate_per_s must be 0 \\(none\\) or at least 0.001"),
    ({"group_rate_per_s": 10_000_000}, "group_rate_per_s"),
    ({"group_burst": -1}, "group_burst"),
    ({"group_burst": "5"}, "group_burst"),
    ({"group_size": 5}, "unknown setting"),
    ({"group_limit": 2, "max_attempts": 0}, "max_attempts"),
])
def test_a_bad_group_setting_is_refused_and_changes_nothing(settings: dict[str, Any],
                                                            says: str) -> None:
    state = queue(["a", None], group_limit=3)
    claim(state, 1)
    before = b"".join(codec.encode_parts(state))
    with pytest.raises(InvalidRequest, match=says):
        T.apply(state, Configure(settings), T0)
    assert b"".join(codec.encode_parts(state)) == before
    assert state.settings.groups == {"group_limit": 3}


def test_a_settings_change_applies_to_the_next_claim() -> None:
    state = queue(["a"] * 4, group_limit=1)
    assert len(claim(state, 4)) == 1
    T.apply(state, Configure({"group_limit": 3}), T0)
    assert seqs(claim(state, 4)) == [2, 3]
    T.apply(state, Configure({"group_limit": None}), T0)
    assert seqs(claim(state, 4)) == [4]


def _segment(state: QueueState, n: int, due_ms: int, load: int | None = None) -> SegmentRef:
    """Reserve n seqs, "write" an ungrouped segment of them, reference it, load
    ``load`` of its lines (all by default)."""
    first = state.counters.enqueued + 1
    data = encode_segment("q", first, 0, due_ms, [b"%d" % (first + i) for i in range(n)],
                          max_attempts=3)
    ref = SegmentRef(segment_key("q", segment_name(first, "0123abcd")), f'"e{first}"',
                     first, n, 0, due_ms)
    state.counters.enqueued += n
    state.segment_refs.append(ref)
    if state.windows is None:
        state.windows = SegmentWindows()
    lines = segment_lines(data, ref)
    state.windows.put(ref, 0, lines if load is None else lines[:load])
    return ref


def test_ungrouped_segment_jobs_are_one_group_with_the_inline_ones() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 1}), T0)
    _segment(state, 5, T0 - 1_000)
    T.apply(state, Push((*[NewJob(b"a", group="a")] * 3, NewJob(b"x"))), T0)
    order = [seq for _ in range(8) for seq in seqs(claim(state, 1))]
    # group 0 (the segment's jobs, older, then job 9) and a (one: its limit) in turns
    assert order == [1, 6, 2, 3, 4, 5, 9]
    assert held(state) == {None: 6, "a": 1} and not state.segment_refs


def test_a_claim_ends_at_a_segment_line_not_loaded() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 1}), T0)
    _segment(state, 5, T0 - 1_000, load=2)
    T.apply(state, Push((NewJob(b"a", group="a"),)), T0)
    got = claim(state, 20)
    assert sorted(seqs(got)) == [1, 2, 6]  # never job 3 before its line is loaded
    assert state.segment_refs[0].taken == 2


def test_stats_show_what_the_limits_hold_back_and_the_busiest_groups() -> None:
    state = queue(["a"] * 5 + ["b"] * 2 + [None], group_limit=2)
    assert "groups" not in T.apply(new_queue(T0), ReadStats(), T0).view
    claim(state, 10)
    T.apply(state, Push((NewJob(b"late", group="c"),)), T0)
    block = T.apply(state, ReadStats(), T0).view["groups"]
    assert block["claimed"] == 5 and block["known"] == 4
    assert block["held_back"] == {"jobs": 3, "groups_at_limit": 1}  # (b has none waiting)
    assert block["busiest"][0] == {"group": "a", "claimed": 2, "pending": 3, "limit": 2,
                                   "weight": 1, "state": "at_limit"}
    assert [row["group"] for row in block["busiest"]] == ["a", "b", None, "c"]
