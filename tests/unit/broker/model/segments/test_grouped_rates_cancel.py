"""Per-group rates across a cancel of a job still in a grouped segment object
(broker.model.cancels moves it into the head; the run's next position takes
its place in its group's heap): the groups and their token buckets are kept,
so no client's cancel refills every group's bucket at once, and the run's
other jobs are still claimed, in order."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.ops import Cancel, Claim, Configure, NewJob, Push
from broker.model.segments.grouped import group_stats
from broker.model.state import SegmentWindows
from tests.support.segment_refs import push_grouped_segment
from tests.support.states import new_queue

T0 = 1_767_225_600_000


def test_a_cancel_in_a_grouped_segment_refills_no_groups_bucket() -> None:
    state = new_queue(T0)
    state.windows = SegmentWindows()
    T.apply(state, Configure({"group_rate_per_s": 1, "group_burst": 1}), T0)
    T.apply(state, Push(tuple(NewJob(b"{}", group="a", max_attempts=1) for _ in range(3))), T0)
    first = push_grouped_segment(state, ["b", "b"], T0, max_attempts=2)
    assert [j.id for j in T.apply(state, Claim("w", 1, 60_000), T0).jobs] == ["j0000000001"]
    [answer] = T.apply(state, Cancel((f"j{first:010d}",)), T0).view
    assert answer.ok
    got = [j.id for j in T.apply(state, Claim("w", 5, 60_000), T0).jobs]
    assert "j0000000002" not in got  # a has no token until T0 + 1 s


def test_a_cancel_of_a_runs_next_job_leaves_the_rest_of_the_run_claimable_in_order() -> None:
    for order in ("fair", "fifo"):
        state = new_queue(T0)
        state.windows = SegmentWindows()
        T.apply(state, Configure({"group_order": order}), T0)
        first = push_grouped_segment(state, ["b", "b", "b", None, "c"], T0, max_attempts=2)
        assert group_stats(state, T0) is not None  # (the runs are registered)
        assert state.groups is not None and state.groups.dirs
        [answer] = T.apply(state, Cancel((f"j{first:010d}",)), T0).view  # b's next job
        assert answer.ok
        got = [int(j.id[1:]) - first for j in T.apply(state, Claim("w", 9, 60_000), T0).jobs]
        assert sorted(got) == ([1, 3, 4] if order == "fifo" else [1, 2, 3, 4]), order
