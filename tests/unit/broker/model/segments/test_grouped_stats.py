"""The ``groups`` block of stats (broker.model.segments.grouped.group_stats)
agrees with the jobs after cancels and purges: a group's pending count is its
pending jobs (due ones in fair order), ``held_back`` the pending jobs of the
groups at their limit, and a group left with nothing pending or claimed is
no longer known. Before the fix a cancelled or purged job stayed counted until
its group was next served."""

from __future__ import annotations

from typing import Any

import pytest

from broker import paths
from broker.model import spills
from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.format.spill_refs import new_ref
from broker.model.job import PENDING
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    Configure,
    NewJob,
    Purge,
    Push,
    PushPayloads,
    ReadStats,
    Reserve,
    groups_of,
)
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from tests.support.segment_refs import push_grouped_segment
from tests.support.spill_objects import ETAG, spill_key
from tests.support.states import QUEUE, new_queue

T0 = 1_767_225_600_000


def queue(groups: list[str | None], **settings: Any) -> QueueState:
    state = new_queue(T0)
    if settings:
        T.apply(state, Configure(settings), T0)
    T.apply(state, Push(tuple(NewJob(b"%d" % i, group=g) for i, g in enumerate(groups))), T0)
    return state


def stats(state: QueueState) -> dict[str, Any]:
    view: dict[str, Any] = T.apply(state, ReadStats(), T0).view
    return view


def pending_by_group(view: dict[str, Any]) -> dict[str | None, int]:
    return {row["group"]: row["pending"] for row in view["groups"]["busiest"] if row["pending"]}


def cancel(state: QueueState, *seqs: int) -> None:
    answers = T.apply(state, Cancel(tuple(f"j{seq:010d}" for seq in seqs)), T0).view
    assert all(answer.ok for answer in answers), answers


def test_a_cancelled_held_back_job_leaves_the_held_back_count() -> None:
    state = queue(["a"] * 5 + ["b"], group_limit=2)
    T.apply(state, Claim("w", 10, 30_000), T0)  # (a: 2 claimed, 3 held back; b: 1 claimed)
    assert stats(state)["groups"]["held_back"] == {"jobs": 3, "groups_at_limit": 1}
    cancel(state, 4)
    view = stats(state)
    assert view["counts"]["pending"] == 2
    assert view["groups"]["held_back"] == {"jobs": 2, "groups_at_limit": 1}
    assert pending_by_group(view) == {"a": 2}


def test_a_group_whose_jobs_are_all_cancelled_shows_none_and_is_not_known() -> None:
    state = queue(["a"] * 3 + ["b"] * 2)
    assert pending_by_group(stats(state)) == {"a": 3, "b": 2}
    cancel(state, 4, 5)
    view = stats(state)
    assert pending_by_group(view) == {"a": 3}
    assert view["groups"]["known"] == 1
    assert [row["group"] for row in view["groups"]["busiest"]] == ["a"]


def test_a_purge_of_pending_jobs_leaves_no_group_pending() -> None:
    state = queue(["a"] * 4 + ["b"] * 3 + [None] * 2, group_limit=1)
    T.apply(state, Claim("w", 3, 30_000), T0)  # (one of each: a and b at their limit)
    assert stats(state)["groups"]["held_back"] == {"jobs": 5, "groups_at_limit": 2}
    T.apply(state, Purge(("pending",)), T0)
    view = stats(state)
    assert view["counts"]["pending"] == 0
    assert pending_by_group(view) == {}
    assert view["groups"]["held_back"] == {"jobs": 0, "groups_at_limit": 0}
    assert view["groups"]["claimed"] == 3  # (the purge left the claimed jobs be)


def test_a_purge_then_pushes_count_only_the_new_jobs() -> None:
    state = queue(["a"] * 4, group_limit=1)
    stats(state)
    T.apply(state, Purge(("pending",)), T0)
    T.apply(state, Push((NewJob(b"x", group="a"), NewJob(b"y", group="b"))), T0)
    assert pending_by_group(stats(state)) == {"a": 1, "b": 1}


def test_a_grouped_segments_jobs_are_counted_through_cancels_and_a_purge() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 1}), T0)
    first = push_grouped_segment(state, ["a"] * 4 + ["b"] * 2, T0)  # (runs a: 0-3, b: 4-5)
    assert pending_by_group(stats(state)) == {"a": 4, "b": 2}
    cancel(state, first, first + 2)  # (a's run entry, then a hole within it)
    cancel(state, first + 4, first + 5)  # (all of b)
    view = stats(state)
    assert view["counts"]["pending"] == 2
    assert pending_by_group(view) == {"a": 2}
    assert view["groups"]["known"] == 1
    T.apply(state, Claim("w", 5, 30_000), T0)  # (a's oldest live job: the limit holds it to 1)
    assert stats(state)["groups"]["held_back"] == {"jobs": 1, "groups_at_limit": 1}
    T.apply(state, Purge(("pending",)), T0)
    view = stats(state)
    assert view["counts"]["pending"] == 0
    assert pending_by_group(view) == {}
    assert view["groups"]["held_back"] == {"jobs": 0, "groups_at_limit": 0}


def test_fifo_groups_count_each_pending_job_once() -> None:
    state = queue(["a"] * 3 + ["b"] * 2, group_order="fifo")
    assert pending_by_group(stats(state)) == {"a": 3, "b": 2}
    cancel(state, 2)
    view = stats(state)
    assert pending_by_group(view) == {"a": 2, "b": 2}
    T.apply(state, Claim("w", 5, 30_000), T0)
    view = stats(state)
    assert pending_by_group(view) == {"a": 1, "b": 1}
    assert view["groups"]["held_back"] == {"jobs": 2, "groups_at_limit": 2}


def test_a_switch_from_fifo_to_fair_counts_each_job_once_when_due() -> None:
    """Fifo order holds a job not due in its group's heap and its entry in the
    delayed heap: the switch gives both back, and the job came in twice."""
    state = new_queue(T0)
    T.apply(state, Configure({"group_order": "fifo"}), T0)
    T.apply(state, Push((NewJob(b"1", group="a"), NewJob(b"2", group="a", delay_ms=1_000))), T0)
    stats(state)  # (the groups built: both jobs in a's heap)
    T.apply(state, Push((NewJob(b"3", group="a"),)), T0)  # (its ready entry not taken in yet)
    T.apply(state, Configure({"group_order": "fair"}), T0)
    assert pending_by_group(stats(state)) == {"a": 2}
    view = T.apply(state, ReadStats(), T0 + 2_000).view
    assert pending_by_group(view) == {"a": 3}
    got = T.apply(state, Claim("w", 10, 30_000), T0 + 2_000).jobs
    assert sorted(got.ids) == ["j0000000001", "j0000000002", "j0000000003"]


def test_a_fifo_grouped_segment_not_yet_due_counts_its_named_groups_only() -> None:
    """In fifo order a grouped segment's runs go into their groups' heaps before
    it is due, but for no group's (None), whose jobs count once due."""
    state = queue([None], group_order="fifo")
    push_grouped_segment(state, [None, None, None, "a", "a"], T0 + 2_000)
    assert pending_by_group(stats(state)) == {"a": 2, None: 1}
    view = T.apply(state, ReadStats(), T0 + 2_000).view
    assert pending_by_group(view) == {"a": 2, None: 4}


def test_pending_jobs_spilled_out_of_the_head_leave_their_groups_count() -> None:
    """Pending job objects without a group (pushed with options) spilled into
    a pending spill object are not in the head: no group counts them."""
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 1}), T0)
    T.apply(state, Push((NewJob(b"a", group="a"), *(NewJob(b"%d" % i, priority=1)
                                                    for i in range(3)))), T0)
    assert pending_by_group(stats(state)) == {"a": 1, None: 3}
    plan = spills.plan_dead(state, "q", 1, 1 << 20, T0, pending=True)
    assert len(plan.seqs) == 3
    spills.attach(state, plan, [new_ref(obj, spill_key(PENDING, 1 + i), ETAG)
                                for i, obj in enumerate(plan.objects)], T0)
    assert pending_by_group(stats(state)) == {"a": 1}


def _ungrouped_segment(state: QueueState, n: int, now: int) -> None:
    """``n`` jobs of no group pushed by reference (an ungrouped segment, due at
    ``now``): group 0's jobs that live in no group heap, only in its head."""
    first = T.apply(state, Reserve(n, 8), now).ids.first
    data = encode_segment(QUEUE, first, 0, now, [b"%d" % i for i in range(n)], max_attempts=2)
    ref = SegmentRef(paths.segment_key(QUEUE, paths.segment_name(first, "0123abcd")),
                     f'"e{first}"', first, n, 0, now)
    state.windows = SegmentWindows()
    T.apply(state, PushPayloads((), refs=(ref,)), now)
    state.windows.put(ref, 0, segment_lines(data, ref))


def _turns(read_stats: bool) -> str:
    """Thirty one-job claims (each completed) of a queue with 40 jobs of no group
    by reference and 40 of group a inline, at one priority; between two claims a
    job of no group is pushed and cancelled, with (``read_stats``) a stats read
    after each. The groups served, ``0`` (no group) or ``a``, in turn."""
    now = T0
    state = new_queue(now)
    T.apply(state, Configure({"group_limit": 4}), now)
    _ungrouped_segment(state, 40, now)
    T.apply(state, Push(tuple(NewJob(b"1", group="a") for _ in range(40))), now)
    served = []
    for _ in range(30):
        now += 1
        out = T.apply(state, Claim("w", 1, 60_000), now).jobs
        served.append(groups_of(out).get(0) or "0")
        T.apply(state, Complete(tuple(CompleteItem(t) for t in out.tokens)), now)
        ids = T.apply(state, Push((NewJob(b"2"),)), now).ids
        if read_stats:
            T.apply(state, ReadStats(), now)  # (takes the new job into group 0's heap)
        T.apply(state, Cancel(tuple(ids)), now)
        if read_stats:
            T.apply(state, ReadStats(), now)  # (drops its entry: group 0's heap empties)
    return "".join(served)


@pytest.mark.xfail(strict=True, reason="group_stats refreshes group 0's head from its heap "
                   "alone: emptied by drop_stale, group 0 (whose jobs are an ungrouped "
                   "segment's) loses its record and pass and comes back as a newcomer, "
                   "winning every turn")
def test_stats_reads_after_cancels_keep_fair_turns_with_an_ungrouped_segment() -> None:
    assert _turns(read_stats=False) == "0a" * 15  # (the control: turns alternate)
    assert _turns(read_stats=True) == "0a" * 15
