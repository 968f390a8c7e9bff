"""broker.service.queue_target's reads of dead spill objects for a redrive
(``_load_spills``) and the model's redrive and purge of spilled dead jobs
(broker.model.spills.redrive_spilled, purge_dead), through an in-process
broker with ``spill_jobs`` on: a redrive copies the jobs back as pending with
their attempts reset, each claimed again exactly once (after a takeover too);
a purge drops the refs; a dropped object is deleted only once the commit that
dropped it landed; a redrive by id takes one job out of its object."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import OutcomeUnknown
from broker.model.job import DEAD, PENDING
from broker.model.ops import FailItem, NewJob
from broker.service.broker import Broker
from broker.storage.files import FileStore
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import crash, run, started, stored, successor, until
from tests.support.spill_store import dead_everywhere, spill_keys

SPILLS = "/spills/"


async def _dead(broker: Broker, n: int) -> list[str]:
    """``n`` jobs pushed with one attempt, claimed and failed: dead, spilled."""
    ids = await broker.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=1) for i in range(n)])
    got = await broker.claim("q", "w", max_jobs=n)
    await broker.fail("q", [FailItem(j.token, f"boom {j.id}", 0) for j in got])
    assert stored(broker.store).spill_refs
    return list(ids)


async def _claim_all(broker: Broker, n: int) -> list[str]:
    got = await broker.claim("q", "w2", max_jobs=n + 10)
    assert all(j.attempt == 1 for j in got)  # (attempts reset by the redrive)
    return sorted(j.id for j in got)


def test_a_redrive_of_all_brings_every_spilled_job_back_once(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        ids = await _dead(a, 25)
        key = spill_keys(store)[0]
        assert await a.redrive("q") == 25
        state = stored(store)
        assert state.spill_refs == [] and dead_everywhere(store) == []
        pending = [j for j in state.jobs.touched() if j.status == PENDING]
        assert sorted(j.id for j in pending) == sorted(ids)
        assert all(j.attempts == 0 and j.last_error == f"boom {j.id}" for j in pending)
        await until(lambda: key not in spill_keys(store))  # (the drop landed: deleted)
        assert await _claim_all(a, 25) == sorted(ids)
        assert (await a.stats("q"))["counts"]["dead"] == 0
        await a.stop()

    run(go())


def test_a_dropped_spill_object_stays_while_the_drop_has_not_landed(tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, spill_jobs=10, commit_timeout_s=1.0)
        await _dead(a, 25)
        key = spill_keys(store)[0]
        before = store.read("q/queue.json").data
        store.inject("write_if_match", NOT_LANDED, key_contains="queue.json", times=None)
        with pytest.raises(OutcomeUnknown):
            await a.purge("q", ["dead"])
        store.heal()
        assert store.read("q/queue.json").data == before
        assert spill_keys(store) == [key]  # referenced still: never deleted
        assert stored(store).spill_refs[0].key == key
        await a.stop()

    run(go())


def test_a_purge_of_dead_drops_the_spill_refs_and_then_their_objects(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        await _dead(a, 25)
        assert await a.purge("q", ["dead"]) == 25
        assert stored(store).spill_refs == []
        await until(lambda: spill_keys(store) == [])
        assert (await a.stats("q"))["counts"]["dead"] == 0
        await a.stop()

    run(go())


def test_a_redrive_by_id_takes_one_job_out_of_its_spill_object(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        ids = await _dead(a, 25)
        assert await a.redrive("q", [ids[7], "j9999999999"]) == 1
        ref, = stored(store).spill_refs
        assert ref.live == 24 and len(ref.out) == 1
        assert dead_everywhere(store) == sorted(ids[:7] + ids[8:])
        assert (await a.stats("q"))["counts"]["dead"] == 24
        assert [j.id for j in await a.claim("q", "w2", max_jobs=5)] == [ids[7]]
        assert await a.redrive("q", [ids[7]]) == 0  # (out: not redriven twice)
        assert await a.redrive("q") == 24
        rest = await _claim_all(a, 24)
        assert rest == sorted(ids[:7] + ids[8:])
        await a.stop()

    run(go())


def test_a_successor_after_a_redrive_claims_each_job_exactly_once(tmp_path: Path) -> None:
    clock = Clock()
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, clock=clock, spill_jobs=10)
        ids = await _dead(a, 25)
        assert await a.redrive("q") == 25
        await crash(a)  # killed right after the redrive landed
        b = await successor(store, clock, spill_jobs=10)
        got = await b.claim("q", "w2", max_jobs=100)
        assert sorted(j.id for j in got) == sorted(ids)
        assert await b.claim("q", "w2", max_jobs=100) == []
        assert stored(store).spill_refs == []
        await b.stop()

    run(go())


def test_counts_stay_exact_across_spill_redrive_and_purge(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        await _dead(a, 25)
        await _dead(a, 30)  # (a second object)
        assert len(stored(store).spill_refs) == 2
        counts = (await a.stats("q"))["counts"]
        assert (counts[DEAD], counts[PENDING]) == (55, 0)
        assert await a.redrive("q") == 55
        counts = (await a.stats("q"))["counts"]
        assert (counts[DEAD], counts[PENDING]) == (0, 55)
        await a.stop()

    run(go())
