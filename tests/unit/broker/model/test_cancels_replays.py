"""A fail repeated with the token of an attempt that failed before its job was
cancelled (the sequence hypothesis found in ``TestCancelMachine``: push, claim,
fail, cancel, the same fail again). The first fail landed, so the repeat is a
replay of it (SPEC section 3, docs/failure-model.md section 4): it answers as
the first did (ok, ``pending``) and changes nothing; the job stays cancelled,
archived once as cancelled, its attempt and failure counted once. The cancel
promise ("its next heartbeat, complete or fail answers cancelled") is about the
token holding the job when it is cancelled, which a failed attempt's is not."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import CLAIMED
from broker.model.job_lines import archive_line
from broker.model.ops import Cancel, Claim, DropArchived, Fail, FailItem, Heartbeat, NewJob, Push
from broker.storage import FileStore
from broker.wire import CANCEL_REQUESTED, CANCELLED, ItemResult
from tests.support.faults import Clock
from tests.support.inprocess import archive_lines, crash, run, started, stored, successor
from tests.support.states import new_queue, read_back

T0 = 1_767_225_600_000


def test_repeat_answer_of_a_fail_before_the_cancel_is_the_first_answer_and_changes_nothing(
) -> None:
    state = new_queue(T0)
    [jid] = T.apply(state, Push((NewJob(b"1", max_attempts=2),)), T0).ids
    [held] = T.apply(state, Claim("w", 1, 3_000), T0).jobs
    fail = Fail((FailItem(held.token, "boom"),))
    [first] = T.apply(state, fail, T0 + 1).items
    assert first == ItemResult(held.token, True, None, "pending")  # back for a retry
    [cancel] = T.apply(state, Cancel((jid,)), T0 + 2).view
    assert (cancel.ok, cancel.status) == (True, CANCELLED)
    codec.stamp(state, "w", T0 + 2, "c-1")
    before = codec.encode(state)
    r = T.apply(state, fail, T0 + 3)
    assert r.items == [first] and not r.changed and codec.encode(state) == before
    back = read_back(before)  # as the next owner reads it: the receipt answers there too
    back.claims = state.claims
    [again] = T.apply(back, fail, T0 + 4).items
    assert again == first and codec.encode(back) == before
    [line] = [archive_line(back.jobs[s]) for s in back.completed[back.seq]]
    rec = orjson.loads(line)
    assert (rec["id"], rec["status"], rec["attempts"], rec["last_error"]) == (
        jid, CANCELLED, 1, "boom")
    c = back.counters
    assert (c.failed, c.cancelled, c.dead, c.completed) == (1, 1, 0, 0)
    T.apply(back, DropArchived((back.seq,)), T0 + 5)  # archived: the job leaves the object
    [late] = T.apply(back, fail, T0 + 6).items
    assert late == first and len(back.jobs) == 0  # not brought back
    assert T.apply(back, Claim("w", 1, 3_000), T0 + 60_000).jobs == []
    assert (back.counters.failed, back.counters.cancelled) == (1, 1)


def test_repeat_answer_of_a_fail_leaves_the_next_attempts_cancel_mark_alone() -> None:
    """The job failed once, was claimed again, then cancelled (marked): the old
    token's repeat answers as before and changes nothing; the new token's next
    call ends the job cancelled."""
    state = new_queue(T0)
    [jid] = T.apply(state, Push((NewJob(b"1", max_attempts=2),)), T0).ids
    [held] = T.apply(state, Claim("w", 1, 3_000), T0).jobs
    fail = Fail((FailItem(held.token, "boom", 0),))
    [first] = T.apply(state, fail, T0 + 1).items
    [again_held] = T.apply(state, Claim("w", 1, 3_000), T0 + 2).jobs
    [cancel] = T.apply(state, Cancel((jid,)), T0 + 3).view
    assert (cancel.ok, cancel.status) == (True, CANCEL_REQUESTED)
    codec.stamp(state, "w", T0 + 3, "c-1")
    before = codec.encode(state)
    r = T.apply(state, fail, T0 + 4)
    assert r.items == [first] and not r.changed and codec.encode(state) == before
    job = state.jobs[1]
    assert job.status == CLAIMED and job.cancel_ms == T0 + 3 and job.attempts == 2
    [beat] = T.apply(state, Heartbeat((again_held.token,)), T0 + 5).items
    assert (beat.ok, beat.status) == (False, CANCELLED)
    assert state.jobs[1].status == CANCELLED
    assert (state.counters.failed, state.counters.cancelled) == (1, 1)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not (p.name.startswith(".") and ".v-" in p.name)}


@pytest.mark.parametrize("where", ["same broker", "after a takeover"])
def test_broker_fail_repeated_after_the_cancel_answers_as_first_and_writes_nothing(
        tmp_path: Path, where: str) -> None:
    store, clock = FileStore(tmp_path), Clock()

    async def main() -> None:
        a = await started(store, "http://a", clock)
        [jid] = await a.push("q", [NewJob(b"1", max_attempts=2)])
        [held] = await a.claim("q", "w", 1, 30.0)
        [first] = await a.fail("q", [FailItem(held.token, "boom")])
        assert (first.ok, first.status) == (True, "pending")
        [cancel] = await a.cancel("q", [jid])
        assert (cancel.ok, cancel.status) == (True, CANCELLED)
        await a._queues["q"].archiver.wait(5)
        broker = a
        if where == "after a takeover":
            await crash(a)
            broker = await successor(store, clock)
            await broker._queues["q"].archiver.wait(5)
        try:
            # the next batch after the archive object landed drops the job from the
            # object: let a heartbeat of the old token (stale: it failed) be that one
            [beat] = await broker.heartbeat("q", [held.token])
            assert not beat.ok and beat.status != CANCELLED
            before = _files(tmp_path)
            assert not stored(store).jobs
            [again] = await broker.fail("q", [FailItem(held.token, "boom")])
            assert again == first
            assert _files(tmp_path) == before  # a replay writes nothing
            stats = await broker.stats("q")
            assert (stats["failed_total"], stats["cancelled_total"]) == (1, 1)
            assert stats["counts"]["pending"] == 0
        finally:
            await broker.stop(drain_s=5)
        assert [(r["id"], r["status"]) for r in archive_lines(store)] == [(jid, CANCELLED)]

    run(main())
