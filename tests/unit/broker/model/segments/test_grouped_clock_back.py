"""Fifo groups and per-group rates in the claims of broker.model.segments.grouped
under a clock that steps back (an owner's clock corrected by NTP): a group whose
head fell due at the later time is not due at the earlier one, so a claim there
takes nothing of it (never an error, never a job before its run-at), the claim
changes nothing, and the group's jobs are claimed, in push order, once due
again; a group's token bucket refills by the latest time seen, never twice over
the same stretch."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import PENDING
from broker.model.ops import Claim, Configure, Fail, FailItem, NewJob, Push
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



def test_a_rate_limited_group_gets_no_extra_token_after_the_clock_stepped_back() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_rate_per_s": 2, "group_burst": 2}), T0)
    assert claimed(state, T0) == []  # (the queue's groups are built at T0)
    back = T0 - 999  # the clock steps back
    T.apply(state, Push(tuple(NewJob(b"{}", group="c", max_attempts=1) for _ in range(3))), back)
    first = list(T.apply(state, Claim("w", 2, 5_000), back).jobs)
    assert len(first) == 2  # the burst
    T.apply(state, Fail((FailItem(first[0].token, "boom", retry_in_ms=0),)), back)  # (dead)
    assert claimed(state, back) == []  # no time has passed: no token
    assert claimed(state, T0 + 499) == []
    assert claimed(state, T0 + 500) == [3]  # the next token, half a second on
