"""The Release operation (broker.model.transitions, broker.model.ops.Release): a
claim whose caller left unanswered hands its jobs back, as if never claimed,
and touches nothing its tokens no longer hold; a repeat of a keyed claim
never hands out a released token, and a release never takes back what a
repeat handed out."""

from __future__ import annotations

from broker.model import tokens
from broker.model import transitions as T
from broker.model.job import CLAIMED, PENDING
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    Fail,
    FailItem,
    Heartbeat,
    PushPayloads,
    Reclaim,
    Release,
)
from broker.model.state import QueueSettings
from tests.support.states import committed, new_queue, queue_of

NOW = 1_767_225_600_000


def test_release_returns_the_job_pending_where_it_stood_attempt_not_counted() -> None:
    """The released job is pending again with its attempts and run-at as before
    the claim, first in claim order again; the next claim is its attempt 1; the
    object written shows it pending, with no lease."""
    state = queue_of(3, NOW)
    first = T.apply(state, Claim("gone", 1, 600_000), NOW).jobs[0]
    result = T.apply(state, Release((first.token,)), NOW + 5)
    assert result.changed and result.count == 1 and list(result.ids) == [first.id]
    job = state.jobs[1]
    assert job.status == PENDING and job.attempts == 0 and job.lease is None
    assert job.run_at_ms == NOW and job.last_error is None
    assert state.counters.failed == 0 and state.counters.reclaimed == 0
    back = committed(state, NOW + 6).jobs[1]
    assert back.status == PENDING and back.attempts == 0 and back.lease is None
    again = T.apply(state, Claim("w2", 1, 30_000), NOW + 7).jobs[0]
    assert again.id == first.id and again.attempt == 1 and again.token != first.token


def test_a_released_token_is_stale_for_complete_fail_and_heartbeat() -> None:
    state = queue_of(1, NOW)
    token = T.apply(state, Claim("gone", 1, 600_000), NOW).jobs[0].token
    T.apply(state, Release((token,)), NOW + 1)
    assert not T.apply(state, Heartbeat((token,)), NOW + 2).items[0].ok
    assert not T.apply(state, Complete((CompleteItem(token),)), NOW + 2).items[0].ok
    assert not T.apply(state, Fail((FailItem(token, "x"),)), NOW + 2).items[0].ok
    assert state.jobs[1].status == PENDING and state.counters.completed == 0


def test_release_on_the_last_attempt_keeps_the_job_alive() -> None:
    """A job on its one allowed attempt, released, can be claimed again (a lease
    that expired there would have made it dead)."""
    state = new_queue(NOW, QueueSettings(max_attempts=1))
    T.apply(state, PushPayloads((b"1",)), NOW)
    token = T.apply(state, Claim("gone", 1, 600_000), NOW).jobs[0].token
    T.apply(state, Release((token,)), NOW + 1)
    assert T.apply(state, Claim("w2"), NOW + 2).jobs[0].attempt == 1


def test_release_leaves_alone_a_job_its_token_no_longer_holds() -> None:
    """Only jobs still held under exactly the released tokens move: a job whose
    lease expired and was claimed by another worker keeps that worker's lease
    and attempt count, and a job completed meanwhile stays completed."""
    state = queue_of(2, NOW)
    old, done = T.apply(state, Claim("gone", 2, 1_000), NOW).jobs
    assert T.apply(state, Complete((CompleteItem(done.token),)), NOW + 1).items[0].ok
    T.apply(state, Reclaim(), NOW + 2_000)
    other = T.apply(state, Claim("w2"), NOW + 2_001).jobs[0]
    assert other.id == old.id and other.attempt == 2
    result = T.apply(state, Release((old.token, done.token)), NOW + 2_002)
    assert not result.changed and result.count == 0
    job = state.jobs[1]
    assert job.status == CLAIMED and job.attempts == 2 and job.lease is not None
    assert job.lease.token == tokens.stored_part(other.token) and job.lease.worker == "w2"
    assert state.jobs[2].status == "completed"


def test_a_keyed_claim_repeated_after_its_release_answers_no_jobs() -> None:
    """A repeat (same request key) of a claim whose jobs were released answers
    an empty claim: never the released tokens, and nothing new claimed for a
    call its client may have given up on; the jobs wait for other claims."""
    state = queue_of(2, NOW)
    claimed = T.apply(state, Claim("gone", 2, 600_000, "r-c1-1"), NOW).jobs
    T.apply(state, Release(tuple(j.token for j in claimed), "r-c1-1"), NOW + 1)
    repeat = T.apply(state, Claim("gone", 2, 600_000, "r-c1-1"), NOW + 2)
    assert repeat.replayed and list(repeat.jobs) == [] and not repeat.changed
    fresh = T.apply(state, Claim("w2", 2, 30_000), NOW + 3).jobs
    assert [j.id for j in fresh] == [j.id for j in claimed]
    assert [j.attempt for j in fresh] == [1, 1]


def test_a_release_after_a_repeat_handed_the_jobs_out_again_changes_nothing() -> None:
    """When a repeat of the claim was answered the jobs first (the client's retry
    came in before the first attempt's release), the release leaves them to it:
    the tokens the repeat answered stay live."""
    state = queue_of(1, NOW)
    first = T.apply(state, Claim("gone", 1, 600_000, "r-c1-1"), NOW).jobs
    repeat = T.apply(state, Claim("gone", 1, 600_000, "r-c1-1"), NOW + 1).jobs
    assert list(repeat) == list(first)
    result = T.apply(state, Release((first[0].token,), "r-c1-1"), NOW + 2)
    assert not result.changed and state.jobs[1].status == CLAIMED
    assert T.apply(state, Complete((CompleteItem(repeat[0].token),)), NOW + 3).items[0].ok


def test_a_keyed_release_whose_claim_receipt_is_gone_changes_nothing() -> None:
    """Without the claim's receipt nobody can tell whether a repeat holds the jobs:
    they are left to their leases."""
    state = queue_of(1, NOW)
    token = T.apply(state, Claim("gone", 1, 600_000, "r-c1-1"), NOW).jobs[0].token
    assert not T.apply(state, Release((token,), "r-other-1"), NOW + 1).changed
    assert state.jobs[1].status == CLAIMED
