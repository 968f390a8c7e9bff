"""Spilled dead jobs (broker.model.spills, broker.service.spill_writer) against
mixed operations through an in-process broker with ``spill_jobs`` on: every
job is, in the store itself, exactly once (pending, claimed or dead in the
head, in one spill object its ref still holds, or archived), no ref names a
missing object, and no spill object is left once the queue is drained."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from broker.errors import OsqueueError
from broker.model.job import CANCELLED, DEAD
from broker.model.ops import CompleteItem, FailItem, Inspect, NewJob
from broker.service.broker import Broker
from broker.storage import ObjectStore
from broker.storage.files import FileStore
from tests.support.faults import (
    Clock,
    FaultyStore,
)
from tests.support.inprocess import (
    archive_lines,
    owning_successor,
    run,
    started,
    stored,
    until,
)
from tests.support.spill_runs import (
    FAULTS,
    GRACE_S,
    LEASE_S,
    claim_more,
    crash_soon,
    drain,
    everywhere,
    finished_archived,
    where,
)
from tests.support.spill_store import spill_keys
from tests.support.tiers import seeds

#: Broker settings besides spill_jobs: jobs inline, or pushed into segments and
#: claimed from them held in claim records.
MODES = {"inline": {}, "segments": {"segment_push_jobs": 5},
         "held": {"segment_push_jobs": 5, "held_in_records": True}}


# (held: a cancel that moved a named segment's rest into the head dropped its ref
# while a claim record still named it, and the next head did not load; fixed on
# main by the ref kept until unnamed, broker.model.segments.claims.move_in)
@pytest.mark.parametrize("mode", ["inline", "segments", "held"])
@pytest.mark.parametrize("faulty", [False, True], ids=["clean", "faults"])
@pytest.mark.parametrize("seed", seeds(4, short=1))  # (seeds past 0: make long only)
def test_mixed_operations_keep_each_spilled_job_exactly_once(tmp_path: Path, seed: int,
                                                             faulty: bool, mode: str) -> None:
    store = FaultyStore(FileStore(tmp_path))
    rnd = random.Random(seed)
    config = {"spill_jobs": 4, "commit_timeout_s": 2.0, "segment_grace_s": GRACE_S,
              **MODES[mode]}

    async def go() -> None:
        clock = Clock()
        a = await started(store, clock=clock, **config)
        pushed: list[str] = []
        cancelled: set[str] = set()
        held: list[str] = []
        failed: set[str] = set()
        used = False  # (segments referenced at some point)
        for _ in range(40):
            priority, attempts = rnd.randrange(3), rnd.choice((1, 1, 2))  # (a push shares them)
            pushed += await a.push("q", [NewJob(b'{"n":%d}' % rnd.randrange(10**6),
                                                priority=priority, max_attempts=attempts)
                                         for _ in range(rnd.randrange(1, 12))])
            got = await a.claim("q", "w", max_jobs=rnd.randrange(1, 12), lease_s=LEASE_S)
            fails = [FailItem(j.token, "boom", 0) for j in got if rnd.random() < 0.7]
            dones = [CompleteItem(j.token) for j in got if rnd.random() < 0.5
                     and j.token not in {f.token for f in fails}]
            held += [j.token for j in got]  # (the drain completes what is still claimed)
            dead = [i for i in pushed if rnd.random() < 0.1]
            calls = [a.fail("q", fails) if fails else asyncio.sleep(0),
                     a.complete("q", dones) if dones else asyncio.sleep(0)]
            pick = rnd.random()
            if pick < 0.15:
                calls.append(a.redrive("q"))
            elif pick < 0.3:
                calls.append(a.redrive("q", dead))
            elif pick < 0.45 and dead:
                calls.append(a.cancel("q", dead[:3]))
            elif pick < 0.55:
                calls.append(claim_more(a, held))
            elif pick < 0.62:
                calls.append(a.purge("q", ["dead"]))
            elif pick < 0.66 and not faulty:  # (a crash mid-batch, another broker goes on)
                calls.append(crash_soon(a))
            if rnd.random() < 0.3:  # (a sweep racing the commit: objects in flight held)
                calls.append(a.sweep_staging())
            clock.advance(rnd.choice((0.001, 0.01, GRACE_S / 2, GRACE_S)))
            rnd.shuffle(calls)
            if faulty and rnd.random() < 0.3:
                method, kind, key = rnd.choice(FAULTS)
                store.inject(method, kind, key_contains=key)
            out = await asyncio.gather(*calls, return_exceptions=True)
            store.heal()
            if a._stopping:  # (the successor takes over once the broker lease is out)
                failed.update(token.split(".")[0] for token in held)  # (leases may expire)
                a, ids = await owning_successor(store, clock, f"http://b{len(pushed)}", **config)
                pushed += ids
            failed.update(f.token.split(".")[0] for f in fails)
            for exc in out:  # (a fault answers unknown or unavailable, nothing else)
                assert not isinstance(exc, BaseException) or isinstance(exc, OsqueueError), exc
            for answers in out:
                if isinstance(answers, list) and answers and hasattr(answers[0], "status"):
                    cancelled.update(x.id for x in answers if x.status == CANCELLED)

            seen = everywhere(store)
            assert [i for i, n in seen.items() if n > 1] == [], where(store, seen)
            used = used or bool(stored(store).segment_refs)
        await drain(a, store, held)
        await finished_archived(a, store, clock)  # (every finished job archived: none awaits it)
        seen = everywhere(store)
        assert [i for i, n in seen.items() if n > 1] == []
        assert set(seen) <= set(pushed)
        assert set(pushed) - set(seen) <= failed  # (dead, purged)
        statuses = {rec["id"]: rec.get("status") for rec in archive_lines(store)}
        assert {i for i in cancelled if statuses[i] != CANCELLED} == set()
        assert stored(store).spill_refs == []
        await a.sweep_staging()  # (orphans of failed spills: listed, then past the grace)
        clock.advance(GRACE_S + 1)
        await a.sweep_staging()
        await until(lambda: spill_keys(store) == [])
        assert used == (mode != "inline")  # (the mode did what it says)
        await a.stop()

    run(go(), timeout_s=120)


def test_find_by_key_or_id_reaches_a_spilled_dead_job(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=2)
        ids = await a.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=1, key=f"k-{i}")
                                 for i in range(5)])
        got = await a.claim("q", "w", max_jobs=5)
        await a.fail("q", [FailItem(j.token, "boom", 0) for j in got])
        assert not list(stored(store).jobs.touched())  # (all five spilled)
        served = a.served("q")
        assert served is not None
        # the dashboard's search box: by key while the dedup window keeps it, and by id
        assert await served.read(Inspect("find", ("k-3",))) == ids[3]
        assert await served.read(Inspect("find", (ids[1],))) == ids[1]
        assert await served.read(Inspect("find", ("k-nothing",))) is None
        await a.stop()

    run(go())


async def _overlapping(broker: Broker, store: ObjectStore) -> list[str]:
    """120 jobs pushed (one attempt each) and claimed; then ten spill objects of
    two dead jobs each, whose seq bounds all hold seq 100: nine of an old job
    that died with a new one (long retries do that), then the one holding
    job 100 (``ids[99]``). The ids."""
    ids = list(await broker.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=1)
                                       for i in range(120)]))
    tokens = {j.id: j.token for j in await broker.claim("q", "w", max_jobs=120)}
    for low, high in [*((i, 110 + i) for i in range(9)), (49, 99)]:
        await broker.fail("q", [FailItem(tokens[ids[low]], "boom", 0),
                                FailItem(tokens[ids[high]], "boom", 0)])
    # (the pushed jobs' pending object, whose jobs the claim holds at its spill part,
    # stays until the claim settles: the dead ones are counted)
    refs = [ref for ref in stored(store).spill_refs if ref.kind == DEAD]
    assert len(refs) == 10 and all(ref.seqs[0] <= 100 <= ref.seqs[1] for ref in refs)
    return ids


def test_a_dead_job_in_the_ninth_spill_object_whose_bounds_hold_it_is_reachable(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=1)  # (two dead jobs: one spill object)
        target = (await _overlapping(a, store))[99]
        assert (await a.job("q", target))["location"] == "spill"
        served = a.served("q")
        assert served is not None and await served.read(Inspect("find", (target,))) == target
        answer, = await a.cancel("q", [target])
        assert answer.status == "finished" and "dead" in (answer.reason or "")
        assert await a.redrive("q", [target]) == 1
        assert [j.id for j in await a.claim("q", "w2", max_jobs=5)] == [target]
        await a.stop()

    run(go())


def test_a_cancel_reaches_a_redriven_job_in_the_ninth_spill_object_whose_bounds_hold_it(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=1)
        ids = await _overlapping(a, store)
        assert await a.redrive("q") == 20  # (by reference: ten pending refs)
        answer, = await a.cancel("q", [ids[99]])
        assert answer.status == CANCELLED  # (not "gone": it was there, and would run)
        got: list[str] = []
        while batch := await a.claim("q", "w2", max_jobs=3):
            got += [j.id for j in batch]
        assert sorted(got) == sorted({*ids[:9], *ids[110:119], ids[49]})
        await a.stop()

    run(go())


def test_a_page_of_dead_jobs_goes_past_more_spill_objects_than_a_step_loads(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=1)
        ids = await _overlapping(a, store)
        dead = sorted({*ids[:9], *ids[110:119], ids[49], ids[99]})
        assert [j["id"] for j in await a.jobs("q", status="dead", limit=100)] == dead
        assert [j["id"] for j in await a.jobs("q", limit=500)
                if j["status"] == "dead"] == dead
        await a.stop()

    run(go())
