"""Claims held at claim records' spill parts under injected faults, through a
broker: a spill object's read failing while a successor materializes its
jobs, the owner killed in the middle of a claim of 2,000 from a spill object,
and a lost reply on the commit that claims from a spill ref. Each checks the
store afterwards: every job archived exactly once, none stranded in the head
or a record, and no spill object left once drained."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from broker.errors import OsqueueError
from broker.model.job import CLAIMED, PENDING
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.service.broker import Broker
from broker.storage import ObjectStore
from broker.storage.files import FileStore
from tests.support.faults import (
    EIO,
    LATE,
    LOST_REPLY,
    LOST_REPLY_412,
    NOT_LANDED,
    Clock,
    FaultyStore,
)
from tests.support.inprocess import (
    archive_lines,
    archived_and_dropped,
    crash,
    run,
    started,
    stored,
    successor,
    until,
)
from tests.support.spill_runs import drain
from tests.support.spill_store import held_at_spill_parts, spill_keys

SPILLING = {"spill_jobs": 10, "spill_pending": True}
LEASE_S = 3600.0


async def _spilled(broker: Broker, n: int) -> list[str]:
    """``n`` jobs pushed (three attempts each), claimed and failed with no retry
    delay: retry-waiting, spilled into pending objects. Their ids."""
    ids = await broker.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=3) for i in range(n)])
    got = await broker.claim("q", "w", max_jobs=n)
    assert len(got) == n
    await broker.fail("q", [FailItem(j.token, "boom", 0) for j in got])
    state = stored(broker.store)
    assert sum(r.live for r in state.spill_refs if r.kind == PENDING) == n
    return list(ids)


async def _check_drained(broker: Broker, store: ObjectStore, clock: Clock,
                         ids: list[str]) -> None:
    """Every job archived exactly once, nothing left in the head, no record,
    no spill ref; every spill object deleted once its drop landed."""
    # (completions of spill parts are done entries: their records, so their refs, go
    # with the commit that drops them once their archive object landed)
    await archived_and_dropped(broker, store, clock)
    archived = Counter(rec["id"] for rec in archive_lines(store))
    assert sorted(archived) == sorted(ids) and set(archived.values()) == {1}
    state = stored(store)
    assert not [j for j in state.jobs.values() if j.status != "completed"]
    assert not state.claim_records and not state.spill_refs
    await until(lambda: spill_keys(store) == [], timeout_s=30)


def test_a_spill_object_read_failing_while_a_successor_materializes_is_retried(
        tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, **SPILLING)
        ids = await _spilled(a, 50)
        held = await a.claim("q", "w2", max_jobs=50, lease_s=LEASE_S)
        assert [j.attempt for j in held] == [2] * 50  # (held at a spill part)
        assert len(held_at_spill_parts(store)) == 50
        await crash(a)
        b = await successor(store, clock, **SPILLING)
        # (its held-jobs cache is empty: a fail reads the named object to materialize the
        # job, which fails once; the archive of the completed ones reads it too, failing once)
        store.inject("read", EIO, key_contains="/spills/", times=2)
        items = [FailItem(j.token, "again", 0) for j in held[:25]]
        try:
            failed = await b.fail("q", items)
        except (OsqueueError, OSError):
            failed = await b.fail("q", items)  # (a client's retry)
        assert [r.ok for r in failed] == [True] * 25
        done = await b.complete("q", [CompleteItem(j.token, b"1") for j in held[25:]])
        assert [r.ok for r in done] == [True] * 25
        await until(lambda: len(store.injected) == 2)
        assert [kind for _, kind, _ in store.injected] == [EIO, EIO]
        await drain(b, store, [])
        await _check_drained(b, store, clock, ids)
        await b.stop()

    run(go(), timeout_s=120)


@pytest.mark.parametrize("landed", [True, False])
def test_an_owner_killed_mid_claim_of_2000_from_a_spill_object_loses_nothing(
        tmp_path: Path, landed: bool) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, **SPILLING)
        ids = await _spilled(a, 2000)
        store.inject("write_if_match", LATE if landed else NOT_LANDED,
                     key_contains="queue.json")
        claim = asyncio.ensure_future(a.claim("q", "w2", max_jobs=2000, lease_s=60.0))
        await asyncio.sleep(0)
        while not store.injected:  # (the claim's commit is under way: the owner dies)
            await asyncio.sleep(0.001)
        await crash(a)
        claim.cancel()
        await asyncio.gather(claim, return_exceptions=True)
        if landed:
            assert store.land_late() == 1  # (the claim's head lands after all)
            state = stored(store)
            assert len(held_at_spill_parts(store)) == 2000 and not state.jobs.entries
        b = await successor(store, clock, **SPILLING)
        clock.advance(61)  # (the dead owner's claim, if it landed, runs out)
        await drain(b, store, [])
        await _check_drained(b, store, clock, ids)
        await b.stop()

    run(go(), timeout_s=180)


@pytest.mark.parametrize("fault", [LOST_REPLY, LOST_REPLY_412])
def test_a_lost_reply_on_the_claim_from_a_spill_ref_answers_its_repeat_the_same(
        tmp_path: Path, fault: str) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, **SPILLING)
        ids = await _spilled(a, 300)
        store.inject("write_if_match", fault, key_contains="queue.json")
        try:
            held = await a.claim("q", "w2", max_jobs=300, lease_s=LEASE_S, request="c-1")
        except OsqueueError:
            held = []
        again = await a.claim("q", "w2", max_jobs=300, lease_s=LEASE_S, request="c-1")
        assert len(again) == 300 and sorted(j.id for j in again) == sorted(ids)
        if held:
            assert [j.token for j in held] == [j.token for j in again]
        assert len(held_at_spill_parts(store)) == 300  # (once: no second claim)
        counts = (await a.stats("q"))["counts"]
        assert (counts[CLAIMED], counts[PENDING]) == (300, 0)
        done = await a.complete("q", [CompleteItem(j.token, b"1") for j in again])
        assert all(r.ok for r in done)
        await drain(a, store, [])
        await _check_drained(a, store, clock, ids)
        await a.stop()

    run(go(), timeout_s=120)
