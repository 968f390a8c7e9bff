"""Fifo groups (``group_order: "fifo"``) in the claims of broker.model.segments.grouped:
one claimed job per group, a group's jobs in seq (push) order, the group's turn
at its head's priority, a head not due (a delay, a retry's backoff) holding the
whole group, dead jobs skipped or holding the group (``group_dead``), release
and reclaim keeping the head, a change of order taking effect at once, and all
of it rebuilt from a decoded head after a takeover."""

from __future__ import annotations

from typing import Any

import pytest

from broker.errors import InvalidRequest
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.directories import group_major
from broker.model.job import DEAD
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
    PushPayloads,
    Reclaim,
    Redrive,
    Release,
    Reserve,
    TakeOver,
)
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from broker.model.views import next_wakeup_ms
from broker.paths import segment_key, segment_name
from tests.support.states import QUEUE, committed, new_queue

T0 = 1_767_225_600_000


def fifo_queue(*jobs: NewJob, **settings: Any) -> QueueState:
    state = new_queue(T0)
    T.apply(state, Configure({"group_order": "fifo", **settings}), T0)
    if jobs:
        T.apply(state, Push(jobs), T0)
    return state


def job(group: str | None, priority: int = 0, delay_ms: int = 0, **kw: Any) -> NewJob:
    return NewJob(b"{}", priority=priority, delay_ms=delay_ms, group=group, **kw)


def claim(state: QueueState, n: int = 10, now: int = T0) -> list[Any]:
    return list(T.apply(state, Claim("w", n, 30_000), now).jobs)


def seqs(jobs: list[Any]) -> list[int]:
    return sorted(int(j.id[1:]) for j in jobs)


def fail(state: QueueState, leased: Any, retry_ms: int | None, now: int = T0) -> None:
    T.apply(state, Fail((FailItem(leased.token, "boom", retry_in_ms=retry_ms),)), now)


def complete(state: QueueState, leased: Any, now: int = T0) -> None:
    assert T.apply(state, Complete((CompleteItem(leased.token),)), now).items[0].ok


def test_one_job_a_group_is_claimed_oldest_first_whatever_the_later_priorities() -> None:
    state = fifo_queue(job("a"), job("a", priority=9), job("b"), job(None), job(None))
    T.apply(state, Push((job("a", priority=5),)), T0)  # (a later push of a)
    got = {int(j.id[1:]): j for j in claim(state)}
    assert sorted(got) == [1, 3, 4, 5]  # a's oldest only, b's, the ungrouped ones (fair)
    assert claim(state) == []
    order = [1]
    complete(state, got[1])
    for _ in range(2):
        [a] = claim(state)
        order.append(int(a.id[1:]))
        complete(state, a)
    assert order == [1, 2, 6]  # push order across pushes; priorities do not reorder a group


def test_a_failed_job_waiting_for_its_retry_holds_its_group_until_run_at() -> None:
    state = fifo_queue(job("a"), job("a"), job("b"), job("b"))
    first = {j.id: j for j in claim(state)}
    assert sorted(first) == ["j0000000001", "j0000000003"]
    fail(state, first["j0000000001"], 1_000)
    complete(state, first["j0000000003"])
    assert seqs(claim(state, now=T0 + 999)) == [4]  # nothing of a: its head waits
    assert next_wakeup_ms(state, T0 + 999) == T0 + 1_000
    again = claim(state, now=T0 + 1_000)
    assert seqs(again) == [1]  # the failed job again, not a's next
    complete(state, again[0], T0 + 1_000)
    assert seqs(claim(state, now=T0 + 1_000)) == [2]


def test_a_head_not_due_holds_the_whole_group() -> None:
    state = fifo_queue(job("a", delay_ms=5_000), job("a"), job("b"))
    assert seqs(claim(state)) == [3]
    assert seqs(claim(state, now=T0 + 4_999)) == []
    assert seqs(claim(state, now=T0 + 5_000)) == [1]


def test_the_group_takes_its_turn_at_its_head_jobs_priority() -> None:
    state = fifo_queue(job("a"), job("a", priority=9), job("b", priority=1))
    assert seqs(claim(state, 1)) == [3]  # b's head (priority 1) before a's (priority 0)
    assert seqs(claim(state, 1)) == [1]


@pytest.mark.parametrize("dead", ["skip", "hold"])
def test_a_dead_job_leaves_the_order_or_holds_the_group(dead: str) -> None:
    state = fifo_queue(job("a", max_attempts=1), job("a"), job("b"), group_dead=dead)
    got = {j.id: j for j in claim(state)}
    fail(state, got["j0000000001"], 0)
    assert state.jobs[1].status == DEAD
    if dead == "skip":
        assert seqs(claim(state)) == [2]
        return
    assert claim(state) == []  # held while it has a dead job
    T.apply(state, Redrive(("j0000000001",)), T0)
    [back] = claim(state)
    assert seqs([back]) == [1]  # the head again, at its seq
    fail(state, back, 0)  # (its one attempt again: dead again)
    assert claim(state) == []
    T.apply(state, Purge((DEAD,)), T0)
    assert seqs(claim(state)) == [2]  # purged: the group goes on


def test_release_and_reclaim_keep_the_head() -> None:
    state = fifo_queue(job("a"), job("a"))
    [a1] = claim(state)
    T.apply(state, Release((a1.token,)), T0)
    [again] = claim(state)
    assert seqs([again]) == [1]
    T.apply(state, Reclaim(), T0 + 31_000)  # its lease ran out
    assert seqs(claim(state, now=T0 + 31_000)) == [1]


def test_a_cancelled_head_waiting_for_its_retry_frees_the_group_at_once() -> None:
    state = fifo_queue(job("a"), job("a"))
    [a1] = claim(state)
    fail(state, a1, 60_000)
    assert claim(state) == []
    T.apply(state, Cancel(("j0000000001",)), T0)
    assert seqs(claim(state)) == [2]


def test_a_fifo_limit_above_one_is_refused_naming_both_and_changes_nothing() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limits": {"x": 3}}), T0)
    before = b"".join(codec.encode_parts(state))
    with pytest.raises(InvalidRequest, match=r"group_order fifo .*group_limits\['x'\] is 3"):
        T.apply(state, Configure({"group_order": "fifo"}), T0)
    assert b"".join(codec.encode_parts(state)) == before
    T.apply(state, Configure({"group_order": "fifo", "group_limits": {"x": 1}}), T0)
    assert state.settings.groups["group_order"] == "fifo"


def test_a_change_of_order_takes_effect_at_once_and_loses_no_job() -> None:
    state = new_queue(T0)
    T.apply(state, Push((job("a"), job("a", priority=5), job("a"), job("a", delay_ms=1))), T0)
    T.apply(state, Configure({"group_order": "fifo"}), T0)
    [first] = claim(state)
    assert seqs([first]) == [1]  # fifo at once: not the priority 5 job
    T.apply(state, Configure({"group_order": "fair"}), T0)
    fair = claim(state, now=T0 + 1)
    assert seqs(fair) == [2, 3, 4]  # fair at once: more of a while 1 is held
    complete(state, first, T0 + 1)
    for leased in fair:
        fail(state, leased, 1_000, T0 + 1)
    T.apply(state, Configure({"group_order": "fifo"}), T0 + 1)
    assert claim(state, now=T0 + 1_000) == []  # (a's head, 2, is due at T0 + 1001)
    order = []
    for now in range(T0 + 1_001, T0 + 1_004):
        [one] = claim(state, now=now)
        order.append(int(one.id[1:]))
        complete(state, one, now)
    assert order == [2, 3, 4] and claim(state, now=T0 + 2_000) == []


def test_the_order_and_the_holds_are_rebuilt_from_a_decoded_head() -> None:
    state = fifo_queue(job("a"), job("a"), job("b", max_attempts=1), job("b"), group_dead="hold")
    got = {j.id: j for j in claim(state)}
    fail(state, got["j0000000001"], 1_000)
    fail(state, got["j0000000003"], 0)  # dead: b held
    loaded = committed(state, T0)
    T.apply(loaded, TakeOver("b-2", "http://b-2", 30_000), T0 + 1)
    assert claim(loaded, now=T0 + 999) == []
    assert seqs(claim(loaded, now=T0 + 1_000)) == [1]
    T.apply(loaded, Redrive(), T0 + 1_000)
    assert seqs(claim(loaded, now=T0 + 1_000)) == [3]


def test_a_claimed_fifo_job_holds_its_group_across_a_takeover() -> None:
    state = fifo_queue(job("a"), job("a"))
    [a1] = claim(state)
    loaded = committed(state, T0)
    T.apply(loaded, TakeOver("b-2", "http://b-2", 30_000), T0 + 1)
    assert claim(loaded, now=T0 + 1) == []
    complete(loaded, a1, T0 + 1)
    assert seqs(claim(loaded, now=T0 + 1)) == [2]


def _grouped_segment(state: QueueState, windows: SegmentWindows, groups: list[str | None],
                     now: int, delay_ms: int = 0) -> tuple[list[int], list[str | None]]:
    """A grouped segment of ``groups`` pushed by reference and loaded: the
    groups of its seqs, in seq order (group-major)."""
    first = T.apply(state, Reserve(len(groups), 8), now).ids.first
    gm = group_major([b"%d" % i for i in range(len(groups))], groups)
    data = encode_segment(QUEUE, first, 0, now + delay_ms, gm.payloads, max_attempts=3,
                          groups=gm.runs)
    assert gm.runs is not None
    ref = SegmentRef(segment_key(QUEUE, segment_name(first, "0123abcd")), f'"e{first}"',
                     first, len(groups), 0, now + delay_ms, groups=len(gm.runs))
    T.apply(state, PushPayloads((), refs=(ref,)), now)
    windows.put_grouped(ref, segment_lines(data, ref), gm.runs)
    return [first + i for i, _ in enumerate(groups)], [g for g, k in gm.runs for _ in range(k)]


def test_a_grouped_segments_runs_take_their_place_in_the_order_by_seq() -> None:
    state = fifo_queue()
    state.windows = SegmentWindows()
    T.apply(state, Push((job("a"),)), T0)  # seq 1
    seg, groups = _grouped_segment(state, state.windows, ["a", "b", "a", None], T0)
    T.apply(state, Push((job("a"), job("b"))), T0)  # seqs 6, 7
    order: list[int] = []
    now = T0
    while True:
        a = [j for j in claim(state, now=now) if state.jobs[int(j.id[1:])].group == "a"]
        if not a:
            break
        assert len(a) == 1
        order.append(int(a[0].id[1:]))
        complete(state, a[0], now)
        now += 1
    assert order == [1, *[s for s, g in zip(seg, groups, strict=True) if g == "a"], 6]


def test_a_delayed_grouped_segment_holds_its_groups_later_jobs() -> None:
    state = fifo_queue()
    state.windows = SegmentWindows()
    seg, _ = _grouped_segment(state, state.windows, ["a", None], T0, delay_ms=2_000)
    T.apply(state, Push((job("a"), job(None))), T0)  # seqs 3, 4
    assert seqs(claim(state)) == [4]  # the later ungrouped job; a waits for its segment's job
    later = seqs(claim(state, now=T0 + 2_000))
    assert later == sorted(seg)  # a's segment job (not 3) and the segment's ungrouped one
