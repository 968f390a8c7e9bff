"""The heads a grouped claim works from (broker.model.segments.grouped): the
entries of a group's heap and the head dispatch was told must be live and due
when a job is handed out. A group whose told head went stale (its job
cancelled or purged while pending) is served at the priority of its live next
job, never at the stale one's; a job kept as its push's line that is not due
yet (the clock stepped back) waits in the delayed heap, as the ungrouped
claim's does, instead of failing the claim.

Each test checks the head itself afterwards (encoded and decoded): every job
exactly once, no group holding more claimed jobs than its limit."""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.model import transitions as T
from broker.model.groups.counts import held_by_group
from broker.model.job import CLAIMED, PENDING
from broker.model.ops import Cancel, Claim, Configure, NewJob, Purge, Push, PushPayloads, ReadStats
from broker.model.state import QueueState
from tests.support.states import committed, new_queue

T0 = 1_767_225_600_000


def claim(state: QueueState, n: int, now: int = T0) -> list[int]:
    return [int(job.id[1:]) for job in T.apply(state, Claim("w", n, 30_000), now).jobs]


def check_head(state: QueueState, limit: int, seqs: list[int]) -> dict[str, Any]:
    """The encoded head decoded: the jobs ``seqs``, each once; each group's claimed
    jobs within ``limit``, and equal to the claim records' positions."""
    loaded = committed(state, T0)  # (encoded as a broker writes it, decoded)
    assert sorted(job.seq for job in loaded.jobs.values()) == seqs
    held = held_by_group(loaded.claim_records.values(), loaded.jobs)
    claimed = Counter(job.group for job in loaded.jobs.values() if job.status == CLAIMED)
    assert held == dict(claimed)
    assert all(n <= limit for group, n in held.items() if group is not None), held
    return held


def test_a_group_whose_told_head_was_cancelled_is_served_at_its_live_priority() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 2}), T0)
    T.apply(state, Push((NewJob(b"1", group="a", priority=9), NewJob(b"2", group="a"),
                         NewJob(b"3", group="b", priority=5))), T0)
    T.apply(state, ReadStats(), T0)  # (the groups built: a's head is job 1, at 9)
    T.apply(state, Cancel(("j0000000001",)), T0)
    assert claim(state, 1) == [3]  # b's job at 5 before a's at 0
    assert claim(state, 1) == [2]
    assert check_head(state, 2, [1, 2, 3]) == {"a": 1, "b": 1}


def test_a_group_whose_told_head_was_purged_is_served_in_priority_order() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 3}), T0)
    T.apply(state, Push((NewJob(b"1", group="a", priority=9),)), T0)
    assert claim(state, 1) == [1]
    T.apply(state, Push((NewJob(b"2", group="b", priority=8), NewJob(b"3", group="b"),
                         NewJob(b"4", group="c", priority=4))), T0)
    T.apply(state, ReadStats(), T0)  # (b's head is job 2, at 8)
    T.apply(state, Purge(("pending",)), T0)
    T.apply(state, Push((NewJob(b"5", group="b", priority=1), NewJob(b"6", group="c",
                                                                     priority=6))), T0)
    assert claim(state, 1) == [6]
    assert claim(state, 1) == [5]
    assert claim(state, 1) == []
    check_head(state, 3, [1, 5, 6])


def test_a_pushed_line_not_due_yet_waits_instead_of_failing_the_claim() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 1}), T0)
    T.apply(state, Push((NewJob(b"0", group="a"),)), T0)
    T.apply(state, PushPayloads((b"1", b"2")), T0)  # (kept as their lines)
    assert claim(state, 5, T0 - 5) == []  # the clock stepped back: nothing is due
    assert [job.status for job in state.jobs.values()] == [PENDING] * 3
    assert sorted(claim(state, 5, T0)) == [1, 2, 3]
    assert check_head(state, 1, [1, 2, 3]) == {"a": 1, None: 2}
