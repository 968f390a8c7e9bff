"""The commit loop's answers when a write's outcome is not known at once (a lost
reply, a write that lands late, a stop with a write in flight): a caller is never
told something other than what landed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from broker.errors import OsqueueError, OutcomeUnknown
from broker.http import parsers
from broker.model import transitions as T
from broker.model.job import COMPLETED
from broker.model.ops import NewJob, PushPayloads
from broker.model.tokens import stored_part
from broker.storage import FileStore
from tests.support.faults import (
    LATE,
    LOST_REPLY,
    LOST_REPLY_412,
    NOT_LANDED,
    REFUSED,
    Clock,
    FaultyStore,
)
from tests.support.inprocess import archive_lines, run, started, stored, until


@pytest.mark.parametrize("kind", [LOST_REPLY, LOST_REPLY_412, NOT_LANDED])
def test_a_complete_reapplied_after_an_unknown_outcome(tmp_path: Path, kind: str) -> None:
    """A complete (one token twice, an unknown token, another token) whose write has
    an unknown outcome (a lost reply, a lost 412, a write that did not land) is
    answered item by item once the outcome is known: the repeated token completes
    its job once with the first result, the caller's items are left as they were,
    and the archive holds each completed job once."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> tuple[list[str], list[str]]:
        a = await started(store)
        ids = await a.push("q", [NewJob(b'"x"'), NewJob(b'"y"')])
        jobs = await a.claim("q", "w1", 2, 30.0)
        store.inject("write_if_match", kind, key_contains="queue.json")
        items = parsers.parse_complete({"items": [{"token": jobs[0].token, "result": 1},
                                              {"token": jobs[0].token, "result": 2},
                                              {"token": "j0000000077.1"},
                                              {"token": jobs[1].token, "result": 3}]})
        answers = await a.complete("q", items)
        assert [(r.ok, r.status) for r in answers] == [
            (True, COMPLETED), (True, COMPLETED), (False, None), (True, COMPLETED)]
        assert len(items) == 4  # the caller's items are left as they were
        await a.stop(drain_s=5)
        return ids, [stored_part(j.token) for j in jobs]  # (the archive keeps these)

    ids, tokens = run(main())
    lines = sorted((rec["id"], rec["token"], rec["result"]) for rec in archive_lines(inner))
    assert lines == [(ids[0], tokens[0], 1), (ids[1], tokens[1], 3)]
    assert stored(inner).counters.completed == 2


def test_claim_answered_empty_while_its_first_attempt_lands(tmp_path: Path) -> None:
    """A claim whose write timed out, and whose re-application (the wall clock having
    stepped back 3 s) claims nothing, is not answered [] while its first attempt
    may still land: once that attempt lands the job is claimed, if at all, under a
    token the caller holds.

    The commit loop once answered callers from a re-application that changed
    nothing although an earlier attempt of the batch was still pending; that
    attempt landed, leaving the job claimed under a token nobody held (stranded
    for a lease; with max_attempts=1, dead without ever running)."""
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> list:
        a = await started(store, clock=clock)
        await a.push("q", [NewJob(b'"x"', max_attempts=1)])
        clock.advance(1)
        store.inject("write_if_match", LATE, key_contains="queue.json")
        # the re-read after the timeout: meanwhile NTP stepped the wall clock back 3 s
        store.inject("read", None, key_contains="queue.json",
                     before=lambda _k: setattr(clock, "ms", clock.ms - 3000))
        got = await a.claim("q", "w1", 1, 30.0, request="c-1")
        store.land_late()  # the first attempt lands after all
        await a.stop(drain_s=5)
        return got

    got = run(main())
    job = stored(inner).job("j0000000001")
    assert job is not None
    held = [j.token for j in got]
    # Promise: a caller is never told "not done" for something that landed.
    assert job.status != "claimed" or (job.lease and job.lease.token in held), (
        f"claim answered {held}, but the store has the job claimed under "
        f"{job.lease.token if job.lease else None} (attempts {job.attempts}/{job.max_attempts})")


def test_stop_with_a_write_in_flight_answers_outcome_unknown(tmp_path: Path) -> None:
    """stop() while a commit's write is in flight answers its callers OutcomeUnknown,
    not BrokerUnavailable: the write runs on in its executor thread and lands after
    the answer. (BrokerUnavailable says the call was never applied: a caller
    without a request key, the broker's own Python API, that retried elsewhere
    would enqueue twice.)"""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    gate = threading.Event()
    entered = threading.Event()
    written = threading.Event()

    def slow(_key: str) -> None:
        entered.set()
        gate.wait(10)  # a slow PUT: it lands, later

    async def main() -> OsqueueError:
        a = await started(store)
        await a.push("q", [NewJob(b'"first"')])
        store.inject("write_if_match", None, key_contains="queue.json", before=slow,
                     after=lambda _key: written.set())
        push = asyncio.create_task(a.push("q", [NewJob(b'"second"')]))
        await until(entered.is_set)
        await a.stop(drain_s=0.5)
        with pytest.raises(OsqueueError) as info:
            await push
        gate.set()
        return info.value

    error = run(main())
    assert written.wait(10), "the held write never returned"  # in its executor thread
    landed = any(j.payload == b'"second"' for j in stored(inner).jobs.values())
    assert landed  # the write did land after the broker answered
    assert isinstance(error, OutcomeUnknown), (
        f"a write that landed was answered {type(error).__name__}: {error}")


def test_bad_call_whose_earlier_attempt_may_land_is_not_told_it_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call whose re-application raises a non-OsqueueError (a simulated bug that
    bites on the re-apply only) while an earlier attempt of its batch may still
    land is never told it failed for good when that attempt lands carrying it: it
    is answered its ids or OutcomeUnknown."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    real = T._HANDLERS[PushPayloads]
    seen = {"n": 0}

    def flaky(state, op, now_ms):  # type: ignore[no-untyped-def]
        if op.payloads == (b'"order-42"',):
            seen["n"] += 1
            if seen["n"] == 2:  # a bug that bites on the re-apply only
                raise RuntimeError("simulated bug")
        return real(state, op, now_ms)

    monkeypatch.setitem(T._HANDLERS, PushPayloads, flaky)

    async def main() -> object:
        a = await started(store)
        await a.push("q", [NewJob(b'"first"')])
        store.inject("write_if_match", LATE, key_contains="q/queue.json")
        try:
            await a.push("q", [b'"order-42"'], request="r-0123456789ab-0", floor=0)
            answer: object = "ids"
        except OsqueueError as exc:
            answer = exc
        store.land_late()  # the timed-out PUT of attempt 1 lands
        await a.stop(drain_s=5)
        return answer

    answer = run(main())
    copies = [j.id for j in stored(inner).jobs.values() if j.payload == b'"order-42"']
    if copies:
        assert isinstance(answer, OutcomeUnknown) or answer == "ids", (
            f"the push was answered {type(answer).__name__} (retryable="
            f"{getattr(answer, 'retryable', None)}): {answer}; yet attempt 1 carrying it "
            f"landed: the queue holds it as {copies}")


def test_a_push_whose_write_landed_is_not_answered_refused_when_the_reread_is(
        tmp_path: Path) -> None:
    """A push whose head write landed but whose reply was lost, and whose re-read
    is then refused (a 403 for a moment): it may not be answered with an error
    that says nothing was written (``StorageRefused``): a client would push the
    job again. Acknowledged, refused or unknown, the store must agree."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> tuple[BaseException | list[str], list[str]]:
        a = await started(store)
        first = await a.push("q", [NewJob(b'"a"')])
        store.inject("write_if_match", LOST_REPLY, key_contains="queue.json")
        store.inject("read", REFUSED, key_contains="queue.json")
        [got] = await asyncio.gather(a.push("q", [NewJob(b'"b"')]), return_exceptions=True)
        await a.stop(drain_s=5)
        return got, first

    got, first = run(main())
    pending = [j.id for j in stored(inner).jobs.values()]
    assert len(pending) == 2  # (the second push landed)
    if isinstance(got, BaseException):
        assert isinstance(got, OutcomeUnknown), repr(got)
    else:
        assert pending == first + got
