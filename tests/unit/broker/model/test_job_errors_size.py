"""broker.model.job's size estimate with error histories: ``max_state_bytes``
(broker.model.inserts.check_room) and the head's ``approx_state_bytes`` see a
job's line through :meth:`~broker.model.job.Job.size_estimate`, so a history of
ERRORS_KEPT texts of MAX_ERROR_CHARS characters (up to ~32 KB a job, eight times
what ``last_error`` alone held) must be counted there, and the estimate kept
as jobs fail (it must equal the one a new owner rebuilds from the written head).
Pure: time passed in."""

from __future__ import annotations

import pytest

from broker.errors import QueueFull
from broker.limits import ERRORS_KEPT, MAX_ERROR_CHARS
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import DEAD, PENDING
from broker.model.job_lines import job_line
from broker.model.ops import Claim, Fail, FailItem, NewJob, Push, Redrive
from broker.model.state import QueueSettings, QueueState
from tests.support.states import new_queue, read_back

NOW = 1_767_225_600_000
LEASE_MS = 60_000
#: the smallest bound a queue may have (broker.limits.SETTING_LIMITS)
BOUND = 64 * 1024
JOBS = 10


def _failing_head(failures: int) -> tuple[QueueState, int]:
    """A queue bounded at :data:`BOUND` whose :data:`JOBS` jobs each failed
    ``failures`` times with MAX_ERROR_CHARS-character (ASCII) texts; the state
    and the time of its last failure."""
    state = new_queue(NOW, QueueSettings(max_state_bytes=BOUND))
    T.apply(state, Push(tuple(NewJob(b'{"n":%d}' % i, max_attempts=failures + 1)
                              for i in range(JOBS))), NOW)
    now = NOW
    for n in range(failures):
        now += 1_000_000  # (past every backoff)
        tokens = T.apply(state, Claim("w", JOBS, LEASE_MS), now).jobs.tokens
        assert len(tokens) == JOBS
        T.apply(state, Fail(tuple(FailItem(token, f"{n}" * MAX_ERROR_CHARS, 0)
                                  for token in tokens)), now + 1)
    return state, now


def test_a_push_into_a_head_its_error_histories_filled_is_refused_as_queue_full() -> None:
    """Ten jobs failing ERRORS_KEPT times with full-length texts make a head of
    ~330 KB against a bound of 64 KB (with ``last_error`` alone it stayed near
    45 KB): a push then is refused, nothing written."""
    state, now = _failing_head(ERRORS_KEPT)
    assert all(len(job.errors) == ERRORS_KEPT for job in state.jobs.values())
    codec.stamp(state, "b", now + 2, "c-1")
    assert len(codec.encode(state)) > 4 * BOUND  # (the head as written: far past its bound)
    jobs_before = len(state.jobs)
    with pytest.raises(QueueFull):
        T.apply(state, Push((NewJob(b'{"more":1}'),)), now + 3)
    assert len(state.jobs) == jobs_before


def test_a_job_s_size_estimate_counts_its_error_history() -> None:
    """A job with ERRORS_KEPT full-length ASCII texts: its estimate is at least
    its line's bytes (the texts are nearly all of them)."""
    state, _ = _failing_head(ERRORS_KEPT)
    job = state.jobs.get(1)
    assert job is not None and len(job.errors) == ERRORS_KEPT
    assert job.size_estimate() >= len(job_line(job))


def test_the_kept_estimate_equals_the_rebuilt_one_through_fail_dead_and_redrive() -> None:
    """The head's ``approx_bytes`` kept as jobs fail (pending, then dead with a
    full history), are redriven and fail again is the one a new owner
    rebuilds from the written head (no drift either way)."""
    state, now = _failing_head(ERRORS_KEPT)
    assert {job.status for job in state.jobs.values()} == {PENDING}
    now += 1_000_000
    tokens = T.apply(state, Claim("w", JOBS, LEASE_MS), now).jobs.tokens
    T.apply(state, Fail(tuple(FailItem(token, "last " * 1_000, 0) for token in tokens)), now + 1)
    assert {job.status for job in state.jobs.values()} == {DEAD}
    for step in range(3):
        codec.stamp(state, "b", now + 2, f"c-{step}")
        back = read_back(codec.encode(state))
        assert back.approx_bytes == state.approx_bytes, step
        assert [job.errors for job in back.jobs.values()] == \
            [job.errors for job in state.jobs.values()]
        now += 1_000_000
        T.apply(state, Redrive(), now)
        tokens = T.apply(state, Claim("w", JOBS, LEASE_MS), now + 1).jobs.tokens
        T.apply(state, Fail(tuple(FailItem(token, f"again {step}", 0) for token in tokens)),
                now + 2)
