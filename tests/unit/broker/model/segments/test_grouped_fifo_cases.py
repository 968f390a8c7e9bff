"""Edge cases of fifo groups, group_dead and per-group rates in the
claims of broker.model.segments.grouped: a fifo group's claimed job released,
reclaimed or cancelled; redrive under both group_dead settings; purge while a
group is held; order switches with claimed jobs; rates with a clock that steps
back, tiny rates; each checked on the state afterwards (every job exactly once,
order per group, never two of a fifo group claimed)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.directories import group_major
from broker.model.job import PENDING
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    Configure,
    Fail,
    FailItem,
    NewJob,
    Purge,
    Push,
    Reclaim,
    Redrive,
    Release,
    TakeOver,
)
from broker.model.segments.grouped import carry_buckets, group_state
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from broker.model.views import next_wakeup_ms
from broker.paths import segment_key, segment_name
from tests.support.states import committed, new_queue

T0 = 1_767_225_600_000


def grouped_segment(state: QueueState, groups: list[str | None]) -> SegmentRef:
    """A grouped segment of jobs in ``groups``, referenced by the head, its
    window and directory loaded (as broker.service loads them)."""
    first = state.counters.enqueued + 1
    gm = group_major([b"%d" % i for i in range(len(groups))], groups)
    assert gm.runs is not None
    data = encode_segment("q", first, 0, T0 - 1_000, gm.payloads, max_attempts=3,
                          groups=gm.runs)
    ref = SegmentRef(segment_key("q", segment_name(first, "0123abcd")), f'"e{first}"',
                     first, len(groups), 0, T0 - 1_000, groups=len(gm.runs))
    state.counters.enqueued += len(groups)
    state.segment_refs.append(ref)
    state.windows = SegmentWindows()
    state.windows.put_grouped(ref, segment_lines(data, ref), gm.runs)
    return ref


def fifo_queue(*jobs: NewJob, **settings: Any) -> QueueState:
    state = new_queue(T0)
    T.apply(state, Configure({"group_order": "fifo", **settings}), T0)
    if jobs:
        T.apply(state, Push(jobs), T0)
    return state


def job(group: str | None, priority: int = 0, delay_ms: int = 0, **kw: Any) -> NewJob:
    return NewJob(b"{}", priority=priority, delay_ms=delay_ms, group=group, **kw)


def claim(state: QueueState, n: int = 10, now: int = T0, lease: int = 30_000) -> list[Any]:
    return list(T.apply(state, Claim("w", n, lease), now).jobs)


def seqs(jobs: list[Any]) -> list[int]:
    return sorted(int(j.id[1:]) for j in jobs)


def complete(state: QueueState, leased: Any, now: int = T0) -> None:
    assert T.apply(state, Complete((CompleteItem(leased.token),)), now).items[0].ok


def drain_order(state: QueueState, group: str, now: int) -> list[int]:
    order = []
    for _ in range(100):
        got = [j for j in claim(state, now=now) if state.jobs[int(j.id[1:])].group == group]
        if not got:
            break
        assert len(got) == 1
        order.append(int(got[0].id[1:]))
        complete(state, got[0], now)
    return order


def test_a_cancelled_claimed_head_lets_the_next_job_go_in_order() -> None:
    state = fifo_queue(job("a"), job("a"), job("a"))
    assert seqs(claim(state)) == [1]
    T.apply(state, Cancel(("j0000000001",)), T0)  # (marked: ends at its lease's end)
    assert claim(state) == []
    T.apply(state, Reclaim(), T0 + 31_000)
    assert drain_order(state, "a", T0 + 31_000) == [2, 3]


def test_a_release_after_later_pushes_still_serves_the_released_head_first() -> None:
    state = fifo_queue(job("a"))
    [a1] = claim(state)
    T.apply(state, Push((job("a"), job("a", priority=9))), T0)
    T.apply(state, Release((a1.token,)), T0)
    assert drain_order(state, "a", T0) == [1, 2, 3]


def test_redrive_in_skip_mode_never_puts_two_of_a_group_in_flight() -> None:
    state = fifo_queue(job("a", max_attempts=1), job("a"), job("a"), group_dead="skip")
    [a1] = claim(state)
    T.apply(state, Fail((FailItem(a1.token, "x", retry_in_ms=0),)), T0)
    [a2] = claim(state)
    assert seqs([a2]) == [2]
    T.apply(state, Redrive(("j0000000001",)), T0)
    assert claim(state) == []  # 2 still claimed: the redriven 1 waits
    complete(state, a2)
    assert drain_order(state, "a", T0) == [1, 3]


def test_purge_of_pending_while_a_group_is_dead_held_then_redrive() -> None:
    state = fifo_queue(job("a", max_attempts=1), job("a"), job("b"), group_dead="hold")
    got = {j.id: j for j in claim(state)}
    T.apply(state, Fail((FailItem(got["j0000000001"].token, "x", retry_in_ms=0),)), T0)
    T.apply(state, Purge((PENDING,)), T0)
    T.apply(state, Push((job("a"),)), T0)
    assert claim(state) == []
    T.apply(state, Redrive(), T0)
    assert drain_order(state, "a", T0) == [1, 4]


def test_fair_to_fifo_with_two_claimed_holds_until_both_settle() -> None:
    state = new_queue(T0)
    T.apply(state, Push((job("a"), job("a"), job("a"))), T0)
    two = claim(state, 2)
    assert seqs(two) == [1, 2]
    T.apply(state, Configure({"group_order": "fifo"}), T0)
    assert claim(state) == []
    complete(state, two[0])
    assert claim(state) == []
    complete(state, two[1])
    assert seqs(claim(state)) == [3]


def test_fifo_rebuilt_after_takeover_with_held_dead_and_retry() -> None:
    state = fifo_queue(job("a"), job("a"), job("b", max_attempts=1), job("b"),
                       group_dead="hold")
    got = {j.id: j for j in claim(state)}
    T.apply(state, Fail((FailItem(got["j0000000003"].token, "x", retry_in_ms=0),)), T0)
    loaded = committed(state, T0)
    T.apply(loaded, TakeOver("b-2", "http://b-2", 30_000), T0 + 1)
    assert claim(loaded, now=T0 + 1) == []
    T.apply(loaded, Reclaim(), T0 + 40_000)
    assert seqs(claim(loaded, now=T0 + 40_000)) == [1]
    T.apply(loaded, Configure({"group_dead": "skip"}), T0 + 40_000)
    assert seqs(claim(loaded, now=T0 + 40_000)) == [4]


def rate_queue(groups: list[str | None], **gs: Any) -> QueueState:
    state = new_queue(T0)
    T.apply(state, Configure(gs), T0)
    T.apply(state, Push(tuple(NewJob(b"%d" % i, group=g) for i, g in enumerate(groups))), T0)
    return state


def rclaim(state: QueueState, n: int, now: int) -> Counter[str | None]:
    got = T.apply(state, Claim("w", n, 600_000), now).jobs
    return Counter(state.jobs[int(j.id[1:])].group for j in got)


def test_a_clock_stepping_back_grants_no_extra_tokens() -> None:
    state = rate_queue(["a"] * 20, group_rate_per_s=1, group_burst=2)
    got = rclaim(state, 50, T0 + 10_000)["a"]
    got += rclaim(state, 50, T0)["a"]  # the owner's clock stepped back 10 s
    got += rclaim(state, 50, T0 + 10_000)["a"]
    assert got == 2  # the burst only: a step back refills nothing, nor the step forward again


def test_a_tiny_rate_with_burst_zero_grants_one_then_waits() -> None:
    state = rate_queue(["a"] * 5, group_rate_per_s=0.001, group_burst=0)
    assert rclaim(state, 10, T0)["a"] == 1
    assert rclaim(state, 10, T0 + 999_999)["a"] == 0
    assert rclaim(state, 10, T0 + 1_000_000)["a"] == 1


def test_a_change_of_other_group_settings_keeps_each_groups_tokens() -> None:
    state = rate_queue(["a"] * 50, group_rate_per_s=1, group_burst=2)
    assert rclaim(state, 50, T0)["a"] == 2  # the burst
    T.apply(state, Configure({"group_limit": 40}), T0)  # (groups rebuilt)
    T.apply(state, Configure({"group_weights": {"a": 3}}), T0)
    assert rclaim(state, 50, T0 + 999)["a"] == 0  # no token yet: still empty
    assert rclaim(state, 50, T0 + 1_000)["a"] == 1  # burst + rate * 1 s = 3 in all


def test_a_smaller_burst_on_a_live_queue_keeps_at_most_the_tokens_left() -> None:
    state = rate_queue(["a"] * 50, group_rate_per_s=1, group_burst=10)
    assert rclaim(state, 3, T0)["a"] == 3
    T.apply(state, Configure({"group_rate_per_s": 0.5, "group_burst": 20}), T0)
    assert rclaim(state, 50, T0)["a"] == 7  # the 7 tokens left, not a fresh 20


def test_a_cancel_inside_a_grouped_run_keeps_each_groups_tokens() -> None:
    state = rate_queue([], group_rate_per_s=1, group_burst=2)
    ref = grouped_segment(state, ["a"] * 10 + ["b"] * 10)
    assert rclaim(state, 50, T0) == {"a": 2, "b": 2}
    [answer] = T.apply(state, Cancel((f"j{ref.first_seq + 5:010d}",)), T0).view
    assert answer.ok  # (a hole in a's run: the groups are rebuilt)
    assert rclaim(state, 50, T0 + 999) == {}
    assert rclaim(state, 50, T0 + 1_000) == {"a": 1, "b": 1}


def test_a_reread_of_the_head_by_its_owner_keeps_each_groups_tokens() -> None:
    state = rate_queue(["a"] * 50, group_rate_per_s=1, group_burst=2)
    assert rclaim(state, 50, T0)["a"] == 2
    fresh = committed(state, T0)
    carry_buckets(state, fresh)  # (what the commit loop's re-read carries over)
    assert rclaim(fresh, 50, T0 + 999)["a"] == 0
    assert rclaim(fresh, 50, T0 + 1_000)["a"] == 1


def test_fifo_with_rate_serves_push_order() -> None:
    state = rate_queue(["a", "a", "a"], group_order="fifo", group_rate_per_s=1000,
                       group_burst=1)
    order = []
    now = T0
    for _ in range(3):
        got = T.apply(state, Claim("w", 5, 600_000), now).jobs
        assert len(got) == 1
        order.append(int(got[0].id[1:]))
        complete(state, got[0], now)
        now += 1
    assert order == [1, 2, 3]


def test_a_head_made_ready_at_a_later_clock_is_not_claimed_before_it_is_due() -> None:
    state = fifo_queue(job("a"), job("b"))
    [a1, b1] = claim(state, now=T0 + 10_000)
    T.apply(state, Push((job("a", delay_ms=5_000),)), T0)  # (the clock moved back 10 s)
    complete(state, a1, T0)  # (settled at the latest time seen: a's head looks due)
    assert claim(state, now=T0 + 1) == []  # not due yet; not a failed claim
    assert state.groups.held("a") == 0
    assert next_wakeup_ms(state, T0 + 1) == T0 + 5_000  # (a long poll wakes when it is due)
    assert seqs(claim(state, now=T0 + 5_000)) == [3]
    complete(state, b1, T0 + 5_000)
    assert [j.status for j in state.jobs.values()].count("claimed") == 1


def test_a_rate_removed_then_set_again_starts_every_bucket_full() -> None:
    state = rate_queue(["a"] * 10, group_rate_per_s=0.001, group_burst=3)
    assert rclaim(state, 1, T0)["a"] == 1
    T.apply(state, Configure({"group_rate_per_s": 0}), T0)
    T.apply(state, Configure({"group_rate_per_s": 0.001}), T0)  # (no claim between)
    assert rclaim(state, 10, T0)["a"] == 3  # a full bucket, as with a claim between


def test_a_smaller_then_larger_burst_gives_the_same_whether_groups_are_built_between() -> None:
    def run(claim_between: bool) -> int:
        state = rate_queue(["a"] * 10, group_rate_per_s=0.001, group_burst=2)
        assert rclaim(state, 1, T0)["a"] == 1
        T.apply(state, Configure({"group_burst": 1}), T0)  # (1 left: full at size 1)
        if claim_between:  # (the groups built again, as a claim builds them)
            group_state(state, T0)
        T.apply(state, Configure({"group_burst": 2}), T0)
        return rclaim(state, 10, T0)["a"]
    assert run(True) == run(False) == 2  # (a full bucket is full at the new size)
