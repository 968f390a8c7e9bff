"""The table of allowed status moves (broker.model.lifecycle): every allowed move
works and keeps the heaps and the encoding in step; every other pair is
refused, changing nothing; and the per-job loops of large calls check it too.
(That random operation sequences only ever make allowed moves is checked by
the state machine in test_transitions.py.)"""

from __future__ import annotations

import itertools

import orjson
import pytest

from broker.model import indexes, lifecycle
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.job import CANCELLED, CLAIMED, COMPLETED, DEAD, PENDING, STATUSES, Job, Lease
from broker.model.lifecycle import GONE, MOVES, NEW, IllegalMove
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    Fail,
    FailItem,
    Heartbeat,
    NewJob,
    Push,
)
from broker.model.state import QueueState
from tests.support.states import new_queue

NOW = 1_767_225_600_000
ALLOWED = {(NEW, PENDING), (PENDING, CLAIMED), (PENDING, GONE), (CLAIMED, PENDING),
           (CLAIMED, DEAD), (CLAIMED, COMPLETED), (CLAIMED, GONE), (DEAD, PENDING),
           (DEAD, GONE), (COMPLETED, GONE),
           (PENDING, CANCELLED), (CLAIMED, CANCELLED), (CANCELLED, GONE)}


def test_the_table_is_the_documented_one() -> None:
    assert {(frm, to) for frm, tos in MOVES.items() for to in tos} == ALLOWED


def _job_in(frm: str) -> tuple[QueueState, Job]:
    """A queue of two jobs (so blocks and heaps hold more than the one under
    test), the second in status ``frm`` (or made but not added, for NEW)."""
    state = new_queue(NOW)
    T.apply(state, Push((NewJob(b'{"other":1}'),)), NOW)
    if frm == NEW:
        state.counters.enqueued += 1
        return state, Job(state.counters.enqueued, b'"new"', PENDING, 0, NOW, 0, 3, NOW)
    [jid] = T.apply(state, Push((NewJob(b'"x"', priority=5, max_attempts=1),)), NOW).ids
    if frm != PENDING:
        [held] = T.apply(state, Claim("w", 1, 60_000), NOW).jobs
        if frm == DEAD:
            T.apply(state, Fail((FailItem(held.token, "boom"),)), NOW)
        elif frm == COMPLETED:
            T.apply(state, Complete((CompleteItem(held.token, b"[1]"),)), NOW)
        elif frm == CANCELLED:
            T.apply(state, Cancel((jid,)), NOW)
            T.apply(state, Heartbeat((held.token,)), NOW)
    codec.stamp(state, "w", NOW, "c-1")
    codec.encode(state)  # every line cached, as after a commit
    job = state.job(jid)
    assert job is not None and job.status == frm
    return state, job


def _fit_for(state: QueueState, job: Job, to: str) -> None:
    """Give ``job`` the fields status ``to`` needs (what the rules do before a move)."""
    job.cancel_ms = NOW if to == CANCELLED else None
    if to == CANCELLED:
        job.done_ms, job.done_seq, job.result = NOW, state.seq + 1, None
        state.counters.cancelled += 1
    elif to in (PENDING, DEAD):
        job.lease = None
        job.done_ms = job.done_seq = job.result = None
        job.done_commit = None
        job.run_at_ms = NOW
        job.attempts = 0 if to == PENDING else job.attempts
    elif to in (CLAIMED, COMPLETED):
        if job.lease is None:
            record = lifecycle.open_claim(state, "w", 60_000, NOW)  # (its claim record)
            state.counters.fence += 1
            job.lease = Lease(f"{job.id}.{state.counters.fence}", "w", 60_000, NOW + 60_000, NOW)
            if to == CLAIMED:
                record.seqs.append(job.seq)
                job.claim = record.fence
                lifecycle.close_claim(state, record)
        if to == COMPLETED:
            job.done_ms, job.done_seq, job.result = NOW, state.seq + 1, b'"ok"'
        else:
            job.done_ms = job.done_seq = job.result = None
            job.done_commit = None


@pytest.mark.parametrize(("frm", "to"), sorted(ALLOWED))
def test_every_allowed_move_updates_status_heaps_and_encoding(frm: str, to: str) -> None:
    state, job = _job_in(frm)
    _fit_for(state, job, to)
    lifecycle.move(state, job, to, NOW)
    if to == GONE:
        assert state.jobs.get(job.seq) is None
    else:
        assert state.jobs[job.seq] is job and job.status == to
        assert job._enc is None  # its line is stale...
        if to == PENDING:
            assert indexes.ready_key(job.priority, NOW, job.seq) in state.ready
        elif to == CLAIMED:
            assert job.lease is not None
            assert job.claim is not None  # (its record holds the lease, one entry a record)
            assert indexes.lease_key(job.lease.expires_ms, job.claim) in state.leases
        elif to in (COMPLETED, CANCELLED):
            assert job.seq in state.completed[state.seq + 1]
    codec.stamp(state, "w", NOW, "c-2")
    data = codec.encode(state)  # ...and the object says what the jobs say
    assert orjson.loads(data) == orjson.loads(codec.encode_full(state))
    back = decode_state(data)
    assert codec.encode(back) == data
    assert back.approx_bytes == state.approx_bytes
    # (the rules drop a commit's completions from the index before removing them)
    assert back.completed == {c: [s for s in seqs if s in state.jobs]
                              for c, seqs in state.completed.items() if set(seqs) & set(state.jobs)}
    assert sorted(back.ready) == sorted(k for k in state.ready if indexes.key_seq(k) in back.jobs
                                        and back.jobs[indexes.key_seq(k)].status == PENDING)


REFUSED = sorted(set(itertools.product((NEW, *STATUSES), (*STATUSES, GONE))) - ALLOWED)


@pytest.mark.parametrize(("frm", "to"), REFUSED)
def test_every_other_move_is_refused_and_changes_nothing(frm: str, to: str) -> None:
    state, job = _job_in(frm)
    _fit_for(state, job, to)
    before = codec.encode(state)
    heaps = (list(state.ready), list(state.delayed), list(state.leases), dict(state.completed))
    with pytest.raises(IllegalMove):
        lifecycle.move(state, job, to, NOW)
    assert job.status == (PENDING if frm == NEW else frm)
    assert (job.seq in state.jobs) == (frm != NEW)
    assert (list(state.ready), list(state.delayed), list(state.leases),
            dict(state.completed)) == heaps
    assert codec.encode(state) == before


def test_a_move_with_the_fields_of_another_status_is_refused() -> None:
    state, job = _job_in(CLAIMED)
    with pytest.raises(IllegalMove):  # a pending job holds no lease
        lifecycle.move(state, job, PENDING, NOW)
    assert job.status == CLAIMED


def test_an_illegal_move_is_a_bug_not_a_refusal() -> None:
    from broker.errors import OsqueueError

    # the commit loop re-reads the object after anything but an OsqueueError
    assert not issubclass(IllegalMove, OsqueueError)


@pytest.mark.parametrize(("move", "call"), [
    ((PENDING, CLAIMED), lambda st: lifecycle.claim_ready(st, "w", 1, 1000, NOW, str)),
    ((CLAIMED, COMPLETED), lambda st: lifecycle.complete_held(st, [], NOW, str, lambda w, t: None)),
    ((NEW, PENDING), lambda st: lifecycle.add_pending_bulk(st, [b"1"], NOW)),
])
def test_the_per_job_loops_check_the_table(monkeypatch: pytest.MonkeyPatch,
                                           move: tuple[str, str], call: object) -> None:
    frm, to = move
    state, _ = _job_in(PENDING)
    monkeypatch.setitem(MOVES, frm, MOVES[frm] - {to})
    with pytest.raises(IllegalMove):
        call(state)  # type: ignore[operator]
