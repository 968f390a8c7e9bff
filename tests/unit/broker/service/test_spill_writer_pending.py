"""broker.service.spill_writer with ``spill_pending`` on (design 2.5): past
``spill_jobs``, the head's pending job objects (retry-waiting, released) leave
it too, into pending spill objects (one a priority, by run-at) that claims
take from as from a segment: each job claimed once, its attempts kept, due
jobs in claim order across objects, none before its run-at; the object
dropped once drained and deleted after that commit landed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.model.job import CLAIMED, PENDING
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.service.broker import Broker
from broker.storage.files import FileStore
from tests.support.faults import Clock
from tests.support.inprocess import (
    archived_and_dropped,
    crash,
    run,
    started,
    stored,
    successor,
    until,
)
from tests.support.spill_store import spill_keys


async def _failed(broker: Broker, n: int, retry_ms: int, priority: int = 0) -> list[str]:
    """``n`` jobs (3 attempts) claimed and failed once, each retried in ``retry_ms``."""
    ids = await broker.push("q", [NewJob(b'{"n":%d}' % i, priority=priority, max_attempts=3)
                                  for i in range(n)])
    got = await broker.claim("q", "w", max_jobs=n)
    assert sorted(j.id for j in got) == sorted(ids)
    answers = await broker.fail("q", [FailItem(j.token, "boom", retry_ms) for j in got])
    assert all(a.ok for a in answers)
    return list(ids)


def test_retry_waiting_jobs_spill_into_a_pending_object_and_are_claimed_once(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10, spill_pending=True)
        ids = await _failed(a, 25, 0)
        state = stored(store)
        ref, = state.spill_refs
        assert (ref.kind, ref.count, ref.taken, ref.reset_ms) == (PENDING, 25, 0, None)
        assert not [j for j in state.jobs.touched() if j.status == PENDING]
        stats = await a.stats("q")
        assert stats["counts"][PENDING] == 25 and stats["in_spills"][PENDING] == 25
        shown = await a.job("q", ids[3])
        assert (shown["location"], shown["status"], shown["attempts"]) == ("spill", PENDING, 1)
        assert shown["last_error"] == "boom"
        assert [r["id"] for r in await a.jobs("q", PENDING, 100)] == sorted(ids)
        got = await a.claim("q", "w2", max_jobs=100)
        assert sorted(j.id for j in got) == sorted(ids)
        assert all(j.attempt == 2 for j in got)  # (its attempts kept: this is the second)
        state = stored(store)  # (held at the claim's spill part: no line, the ref named)
        assert not list(state.jobs.touched()) and state.spill_refs[0].live == 0
        assert (await a.job("q", ids[3]))["status"] == CLAIMED
        await a.complete("q", [CompleteItem(j.token) for j in got])
        # (completions are done entries: named until archived, then dropped)
        await archived_and_dropped(a, store, None)
        assert stored(store).spill_refs == []
        await until(lambda: spill_keys(store) == [])  # (dropped, then deleted)
        await a.stop()

    run(go())


def test_spilled_retries_come_back_at_their_run_at_in_claim_order_across_objects(
        tmp_path: Path) -> None:
    clock = Clock()
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, clock=clock, spill_jobs=10, spill_pending=True)
        late = await _failed(a, 15, 2_000)
        early = await _failed(a, 15, 1_000, priority=1)
        refs = stored(store).spill_refs
        assert [(r.kind, r.count, r.priority) for r in refs] == [(PENDING, 15, 0),
                                                                (PENDING, 15, 1)]
        assert await a.claim("q", "w2", max_jobs=100) == []  # (none due yet)
        clock.advance(1.5)
        got = [j.id for j in await a.claim("q", "w2", max_jobs=100)]
        assert got == sorted(early)  # (only the due ones)
        clock.advance(1.0)
        held = await a.claim("q", "w2", max_jobs=100)
        assert [j.id for j in held] == sorted(late)
        await a.fail("q", [FailItem(j.token, "again", 60_000) for j in held])
        # (the early ones' claim holds its exhausted ref; the late ones' failed again)
        assert [r.priority for r in stored(store).spill_refs if r.live == 0] == [1]
        await a.stop()

    run(go())


def test_a_claim_takes_the_best_of_the_head_and_the_spilled_retries(tmp_path: Path) -> None:
    clock = Clock()
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, clock=clock, spill_jobs=10, spill_pending=True)
        retried = await _failed(a, 15, 0)  # (due now, spilled)
        clock.advance(1.0)
        fresh = await a.push("q", [NewJob(b'{"f":1}', priority=1), b'{"plain":1}'])
        got = [j.id for j in await a.claim("q", "w2", max_jobs=5)]
        # priority first, then run-at: the fresh urgent one, then the retries (due
        # earlier than the plain push)
        assert got == [fresh[0], *sorted(retried)[:4]]
        rest = [j.id for j in await a.claim("q", "w2", max_jobs=100)]
        assert rest == [*sorted(retried)[4:], fresh[1]]
        await a.stop()

    run(go())


def test_spill_pending_off_keeps_retry_waiting_jobs_inline(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10, spill_pending=False)
        await _failed(a, 25, 0)
        state = stored(store)
        assert state.spill_refs == []
        assert len([j for j in state.jobs.touched() if j.status == PENDING]) == 25
        await a.stop()

    run(go())


def test_a_successor_claims_the_rest_of_a_partly_claimed_pending_spill_once(
        tmp_path: Path) -> None:
    clock = Clock()
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, clock=clock, spill_jobs=10, spill_pending=True)
        ids = await _failed(a, 25, 0)
        first = [j.id for j in await a.claim("q", "w2", max_jobs=10, lease_s=3600)]
        await crash(a)  # killed right after: 10 claimed from the object, 15 left in it
        assert stored(store).spill_refs[0].taken == 10
        b = await successor(store, clock, spill_jobs=10, spill_pending=True)
        got = [j.id for j in await b.claim("q", "w3", max_jobs=100)]
        assert sorted(got) == sorted(set(ids) - set(first)) and len(got) == 15
        assert await b.claim("q", "w3", max_jobs=100) == []
        assert stored(store).spill_refs[0].live == 0  # (named by both claims' records)
        await b.stop()

    run(go())


def test_a_waiting_claim_wakes_when_a_spilled_retry_falls_due(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10, spill_pending=True)
        ids = await _failed(a, 15, 1_500)  # (due in 1.5 s, in a spill object)
        assert stored(store).spill_refs
        got = await asyncio.wait_for(a.claim("q", "w2", max_jobs=100, wait_s=20), 15)
        assert sorted(j.id for j in got) == sorted(ids)  # (woken by the timer, not at 20 s)
        await a.stop()

    run(go())
