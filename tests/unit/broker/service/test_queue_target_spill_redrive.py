"""broker.service.queue_target's reads of spill objects for claims and
redrives (``_load_spills``) and the model's redrive, claims and purge of
spilled jobs (broker.model.spills: redrive_spilled, move_in, purge_spilled),
through an in-process broker with ``spill_jobs`` on: a redrive of all is by
reference (one ref edit), each job then claimed exactly once with its
attempts reset, in claim order with the head's own (after a takeover too); a
purge drops the refs; a dropped object is deleted only once the commit that
dropped it landed; a redrive by id takes one job out of its object."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from broker.errors import OutcomeUnknown
from broker.model.job import CLAIMED, DEAD, PENDING
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.service.broker import Broker
from broker.storage.files import FileStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock, FaultyStore
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
from tests.support.parked import ParkedEvent
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
    got = await broker.claim("q", "w2", max_jobs=n)
    assert all(j.attempt == 1 for j in got)  # (attempts reset by the redrive)
    return sorted(j.id for j in got)


def test_a_redrive_of_all_is_by_reference_and_each_job_is_claimed_once(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        ids = await _dead(a, 25)
        key = spill_keys(store)[0]
        size = len(store.read("q/queue.json").data)
        assert await a.redrive("q") == 25
        state = stored(store)
        ref, = state.spill_refs  # one edit of the ref: nothing copied into the head
        assert (ref.key, ref.kind, ref.taken) == (key, PENDING, 0) and ref.reset_ms
        assert len(store.read("q/queue.json").data) - size < 300
        assert not list(state.jobs.touched()) and dead_everywhere(store) == []
        counts = (await a.stats("q"))["counts"]
        assert (counts[DEAD], counts[PENDING]) == (0, 25)
        shown = await a.job("q", ids[3])
        assert (shown["location"], shown["status"], shown["attempts"]) == ("spill", PENDING, 0)
        assert shown["last_error"] == f"boom {ids[3]}"
        got = await a.claim("q", "w2", max_jobs=10)  # in claim order: by seq here
        assert [j.id for j in got] == sorted(ids)[:10] and all(j.attempt == 1 for j in got)
        assert stored(store).spill_refs[0].taken == 10
        rest = await a.claim("q", "w2", max_jobs=15)
        assert [j.id for j in rest] == sorted(ids)[10:] and all(j.attempt == 1 for j in rest)
        # (exhausted, but named by the claims' records, which hold the jobs: it stays)
        assert stored(store).spill_refs[0].live == 0
        shown = await a.job("q", ids[3])
        assert (shown["location"], shown["status"], shown["attempts"]) == ("spill", CLAIMED, 1)
        await a.complete("q", [CompleteItem(j.token) for j in [*got, *rest]])
        # (completions are done entries: named until archived, then dropped)
        await archived_and_dropped(a, store, None)
        assert stored(store).spill_refs == []  # (exhausted and named by none: dropped)
        await until(lambda: key not in spill_keys(store))  # (the drop landed: deleted)
        assert await a.claim("q", "w2", max_jobs=10) == []
        await a.stop()

    run(go())


def test_a_claim_takes_redriven_jobs_in_claim_order_with_the_heads_own(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        ids = await a.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=1, priority=i % 3)
                                 for i in range(30)])
        got = await a.claim("q", "w", max_jobs=30)
        await a.fail("q", [FailItem(j.token, "boom", 0) for j in got])
        urgent = await a.push("q", [NewJob(b'{"u":1}', priority=2)])
        low = await a.push("q", [NewJob(b'{"l":1}', priority=0)])
        assert await a.redrive("q") == 30
        order = [j.id for j in await a.claim("q", "w2", max_jobs=40)]
        by_priority = {i: 2 - (n % 3) for n, i in enumerate(ids)}
        by_priority |= {urgent[0]: 0, low[0]: 2}
        # every job once, priority first (higher first), then run-at (the
        # redriven ones are due at the redrive, after the pushes), then seq
        assert sorted(order) == sorted([*ids, *urgent, *low])
        assert [by_priority[i] for i in order] == sorted(by_priority[i] for i in order)
        assert order.index(urgent[0]) < order.index(sorted(i for i in ids
                                                           if by_priority[i] == 0)[0])
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
        later = await a.push("q", [b'{"later":1}'])  # (above: the redriven one lands below)
        assert await a.redrive("q", [ids[7], "j9999999999"]) == 1
        seqs = [line["seq"] for line in orjson.loads(store.read("q/queue.json").data)["jobs"]]
        assert seqs == sorted(seqs) and len(seqs) == 2  # (the head's lines in seq order)
        ref, = stored(store).spill_refs
        assert ref.live == 24 and len(ref.out) == 1
        assert dead_everywhere(store) == sorted(ids[:7] + ids[8:])
        assert (await a.stats("q"))["counts"]["dead"] == 24
        got = [j.id for j in await a.claim("q", "w2", max_jobs=5)]
        assert sorted(got) == sorted([ids[7], *later])
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
        held = await a.claim("q", "w2", max_jobs=10, lease_s=3600)
        first = [j.id for j in held]
        await crash(a)  # killed right after: 10 claimed from the ref, 15 left in it
        assert stored(store).spill_refs[0].taken == 10
        b = await successor(store, clock, spill_jobs=10)
        got = await b.claim("q", "w3", max_jobs=100)
        assert sorted(j.id for j in got) == sorted(set(ids) - set(first))
        assert sorted(first) == sorted(ids)[:10]
        assert await b.claim("q", "w3", max_jobs=100) == []
        # the successor settles the first owner's claim (its held cache empty: it loads
        # the named object first) and its own; then the ref goes, and its object
        key = stored(store).spill_refs[0].key
        done = await b.complete("q", [CompleteItem(j.token) for j in [*held, *got]])
        assert all(r.ok for r in done)
        await archived_and_dropped(b, store, clock)  # (done entries: named until archived)
        assert stored(store).spill_refs == []
        await until(lambda: key not in spill_keys(store))
        await until(lambda: sorted(r["id"] for r in archive_lines(store)) == sorted(ids))
        await b.stop()

    run(go())


@pytest.mark.parametrize("fault", [LOST_REPLY, LOST_REPLY_412])
def test_a_redrive_whose_reply_is_lost_lands_once(tmp_path: Path, fault: str) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        ids = await _dead(a, 25)
        store.inject("write_if_match", fault, key_contains="queue.json")
        try:
            assert await a.redrive("q") == 25
        except OutcomeUnknown:
            pass  # (answered unknown: the store says what landed)
        ref, = stored(store).spill_refs
        assert ref.kind == PENDING and ref.taken == 0
        assert await _claim_all(a, 25) == sorted(ids)
        assert await a.claim("q", "w2", max_jobs=5) == []
        await a.stop()

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


def test_a_waiting_claim_wakes_when_a_redrive_by_reference_lands(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        ids = await _dead(a, 25)
        q = a.served("q")
        assert q is not None
        ready = q.jobs_ready = ParkedEvent()  # (says when the claim waits on it)
        waiter = asyncio.create_task(a.claim("q", "w2", max_jobs=5, wait_s=30))
        await ready.waiting.wait()  # (it waits: nothing pending)
        assert await a.redrive("q") == 25
        got = await asyncio.wait_for(waiter, 10)  # (well before its 30 s)
        assert [j.id for j in got] == sorted(ids)[:5]
        await a.stop()

    run(go())


def test_a_cancel_inside_a_spill_object_takes_the_pending_job_out_or_answers_finished(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        ids = await _dead(a, 25)
        before = store.read("q/queue.json").data
        answer, = await a.cancel("q", [ids[2]])  # dead in its object
        assert (answer.ok, answer.status) == (False, "finished")
        assert store.read("q/queue.json").data == before  # (nothing changed)
        assert await a.redrive("q") == 25
        answer, = await a.cancel("q", [ids[2]])  # pending now: out of the object
        assert (answer.ok, answer.status) == (True, "cancelled")
        ref, = stored(store).spill_refs
        assert ref.live == 24 and ref.out
        counts = (await a.stats("q"))["counts"]
        assert (counts[PENDING], counts["cancelled"]) == (24, 1)
        assert await _claim_all(a, 25) == sorted(set(ids) - {ids[2]})
        await a.stop()

    run(go())
