"""broker.model.job's error history (ErrorEntry, bounded_errors, with_error) and
its way through every path a failing job takes (broker.model.transitions,
broker.model.spills, broker.model.spill_parts, broker.model.format): a job that
fails through inline, spilled and spill-part claims keeps its first failure and
its latest ones, each with its attempt, the commit's time and its text cut, in
the head's line, in its spill object and in its views. Pure: time passed in."""

from __future__ import annotations

import orjson

from broker import timefmt
from broker.limits import ERRORS_KEPT, MAX_ERROR_CHARS
from broker.model import browse
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.spill_format import spill_jobs
from broker.model.format.spill_refs import new_ref
from broker.model.job import (
    DEAD,
    NO_ERRORS,
    PENDING,
    ErrorEntry,
    Job,
    bounded_errors,
    job_id_for,
    with_error,
)
from broker.model.ops import Claim, Fail, FailItem, NewJob, Push, Reclaim, Redrive
from broker.model.spills import attach, plan_dead
from broker.model.state import QueueState
from tests.support.spill_claims import load_held, load_spill, spill_data
from tests.support.spill_objects import ETAG, spill_key
from tests.support.states import new_queue, read_back

NOW = 1_767_225_600_000
LEASE_MS = 60_000


def _text(n: int) -> str:
    """Failure ``n``'s text: longer than kept, its tail naming it."""
    return "x" * (MAX_ERROR_CHARS + 500) + f" boom {n}"


def test_with_error_keeps_the_first_and_the_latest_entries_each_text_cut() -> None:
    errors = NO_ERRORS
    for n in range(1, 13):
        errors = with_error(errors, n, NOW + n, _text(n))
        assert errors == bounded_errors([ErrorEntry(k, NOW + k, _text(k))
                                         for k in range(1, n + 1)])
    assert [e.attempt for e in errors] == [1, 6, 7, 8, 9, 10, 11, 12]
    assert len(errors) == ERRORS_KEPT
    assert all(len(e.text) == MAX_ERROR_CHARS and e.text.endswith(f" boom {e.attempt}")
               for e in errors)


def test_a_job_that_never_failed_shares_the_empty_history() -> None:
    job = Job(1, b"1")
    assert job.errors is NO_ERRORS and job.last_error is None
    assert "errors" not in job.to_dict()
    assert Job(1, b"1", last_error="old").errors == (ErrorEntry(1, 0, "old"),)


def _queue() -> QueueState:
    state = new_queue(NOW)
    T.apply(state, Push((NewJob(b'{"doc":1}', max_attempts=12),)), NOW)
    return state


def _round_trip(state: QueueState) -> QueueState:
    """The head written and read back, as a new owner would (its spill windows
    and held-jobs cache carried over: the same objects)."""
    codec.stamp(state, "b", state.updated_ms, "c-x")
    again = read_back(codec.encode(state))
    again.held_in_records = state.held_in_records
    again.held, again.spill_windows = state.held, state.spill_windows
    return again


def _spill(state: QueueState, now: int, commit: int, kind: str = PENDING) -> bytes:
    """Spill the head's job objects (by the rule, forced: every byte counts) and
    load the object as a claim would; its bytes."""
    plan = plan_dead(state, "q", 1_000, 1, now, pending=True)
    (obj,) = plan.objects
    assert obj.kind == kind
    ref = new_ref(obj, spill_key(kind, commit), ETAG)
    attach(state, plan, [ref], now)
    codec.stamp(state, "b", now, f"c-{commit}")  # (the commit's last change: then written)
    codec.encode(state)
    spill_data[ref.key] = obj.data
    load_spill(state, ref, obj.data)
    assert not state.jobs.entries  # (it left the head)
    return obj.data


def test_a_job_failing_12_times_inline_spilled_and_at_spill_parts_keeps_first_and_latest() -> None:
    """Failures 1..12, the job claimed from the head, from a spill object moved
    into the head, or held at a claim record's spill part in turn, the head
    written and read back after each: the history is attempts [1, 6..12], each
    failed at its commit's time, its text cut to the last MAX_ERROR_CHARS
    characters, the same in the head's line, the spill object and the views."""
    state = _queue()
    now = NOW
    for n in range(1, 13):
        path = n % 3  # 1: inline; 2: spilled, moved into the head; 0: at a spill part
        state.held_in_records = path == 0
        now += 1_000
        (token,) = T.apply(state, Claim("w1", 1, LEASE_MS), now).jobs.tokens
        if path == 0:
            (record,) = state.claim_records.values()
            assert record.spills  # (held at its spill part, no line)
            state = _round_trip(state)
            load_held(state)
        now += 10
        T.apply(state, Fail((FailItem(token, _text(n), 0),)), now)
        state = _round_trip(state)
        job = state.jobs.get(1)
        assert job is not None and job.attempts == n
        assert job.status == (DEAD if n == 12 else PENDING)
        want = bounded_errors([ErrorEntry(k, NOW + 1_010 * k, _text(k)) for k in range(1, n + 1)])
        assert job.errors == want, n
        assert job.last_error == want[-1].text
        if n < 12 and (n + 1) % 3 != 1:  # the next claim takes it from a spill object
            data = _spill(state, now, 100 + n)
            assert spill_jobs(data, state.spill_refs[-1])[0].errors == want
    assert [e.attempt for e in job.errors] == [1, 6, 7, 8, 9, 10, 11, 12]
    assert all(len(e.text) == MAX_ERROR_CHARS for e in job.errors)
    (line,) = [orjson.loads(raw.rstrip(b",")) for raw in codec.encode(state).split(b"\n")
               if raw.startswith(b'{"id":"%s"' % job.id.encode())]
    assert line["last_error"] == job.last_error
    assert [e[:2] for e in line["errors"]] == [[e.attempt, timefmt.fmt(e.failed_ms)]
                                               for e in job.errors]
    assert line["errors"][-1][2] is None  # (its text is last_error's, not stored twice)
    shown = browse.job(state, now, "q", job.id)
    assert shown is not None and shown["errors"] == job.errors_view()
    assert [e["attempt"] for e in shown["errors"]] == [1, 6, 7, 8, 9, 10, 11, 12]
    data = _spill(state, now, 200, DEAD)
    (dead,) = spill_jobs(data, state.spill_refs[-1])
    assert dead.errors == job.errors
    T.apply(state, Redrive(), now + 1)  # by reference: the history kept
    load_spill(state, state.spill_refs[-1], data)
    state.held_in_records = False
    T.apply(state, Claim("w1", 1, LEASE_MS), now + 2)
    again = state.jobs.get(1)
    assert again is not None and again.errors == job.errors and again.attempts == 1


def test_a_reclaim_and_a_textless_failure_add_entries_last_error_as_before() -> None:
    """An expired lease is a failure of its attempt (its text says so, as
    ``last_error`` always did); a failure without text adds an entry of ``""``
    and leaves ``last_error`` None; a redrive by id keeps the history."""
    state = new_queue(NOW)
    T.apply(state, Push((NewJob(b"1", max_attempts=3),)), NOW)
    T.apply(state, Claim("w1", 1, 1_000), NOW + 1)
    T.apply(state, Reclaim(), NOW + 2_000)
    (token,) = T.apply(state, Claim("w2", 1, LEASE_MS), NOW + 2_001).jobs.tokens
    T.apply(state, Fail((FailItem(token, "", 0),)), NOW + 2_002)
    job = state.jobs.get(1)
    assert job is not None and job.last_error is None
    assert job.errors == (
        ErrorEntry(1, NOW + 2_000, "lease expired (worker w1 stopped heartbeating)"),
        ErrorEntry(2, NOW + 2_002, ""))
    (token,) = T.apply(state, Claim("w2", 1, LEASE_MS), NOW + 2_003).jobs.tokens
    T.apply(state, Fail((FailItem(token, "third"),)), NOW + 2_004)
    assert job.status == DEAD and [e.text for e in job.errors][-1] == "third"
    T.apply(state, Redrive(ids=(job_id_for(1),)), NOW + 2_005)
    again = _round_trip(state).jobs.get(1)
    assert again is not None and again.status == PENDING and again.attempts == 0
    assert again.errors == job.errors


def test_a_failure_text_with_a_lone_surrogate_is_kept_escaped_and_the_head_encodes() -> None:
    # (a message naming a file whose name is not UTF-8, as os.listdir gives it)
    state = new_queue(NOW)
    T.apply(state, Push((NewJob(b"1", max_attempts=3),)), NOW)
    (token,) = T.apply(state, Claim("w", 1, LEASE_MS), NOW + 1).jobs.tokens
    T.apply(state, Fail((FailItem(token, "open: b'\udcff.csv'", 0),)), NOW + 2)
    job = state.jobs.get(1)
    assert job is not None and job.status == PENDING
    assert job.last_error == "open: b'\\udcff.csv'"
    again = _round_trip(state).jobs.get(1)  # the head encodes, and loads
    assert again is not None and again.errors == job.errors
