"""Fifo groups in the claims of broker.model.segments.grouped under a clock that
steps back (an owner's clock corrected by NTP): a group whose head fell due at
the later time is not due at the earlier one, so a claim there takes nothing
of it (never an error, never a job before its run-at), the claim changes
nothing, and the group's jobs are claimed, in push order, once due again."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import PENDING
from broker.model.ops import Claim, Configure, NewJob, Push
from broker.model.state import QueueState
from tests.support.states import new_queue

T0 = 1_767_225_600_000


def fifo_queue() -> QueueState:
    state = new_queue(T0)
    T.apply(state, Configure({"group_order": "fifo"}), T0)
    return state


def claimed(state: QueueState, now: int, n: int = 5) -> list[int]:
    return sorted(int(j.id[1:]) for j in T.apply(state, Claim("w", n, 5_000), now).jobs)


def test_a_claim_after_the_clock_stepped_back_takes_no_job_before_its_run_at() -> None:
    state = fifo_queue()
    assert claimed(state, T0) == []  # (the queue's groups are built)
    later = T0 + 1_001
    T.apply(state, Push((NewJob(b"{}", priority=3), NewJob(b"{}", group="b"),
                         NewJob(b"{}", group="b"))), later)
    before = codec.encode(state)
    assert claimed(state, T0 - 1_999) == []  # 3 s back: nothing is due yet
    assert codec.encode(state) == before
    assert all(state.jobs[seq].status == PENDING for seq in (1, 2, 3))
    assert claimed(state, later) == [1, 2]  # due again: b's oldest only
    assert state.claim_records and claimed(state, later) == []

