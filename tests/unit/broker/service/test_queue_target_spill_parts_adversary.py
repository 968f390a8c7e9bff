"""Claims held at claim records' spill parts (broker.model.spill_parts) against
mixed operations through an in-process broker, pending spills on and a
small ``spill_jobs`` so that most claims take from pending spill refs: fails
(to retry, with and without a delay, and to dead), completes, releases,
heartbeats, cancels of claimed jobs and of their siblings, repeated and
stale tokens, leases running out on clock steps and reclaimed, redrives (all
and by id), purges, owners killed mid-batch and successors, injected storage
faults. After every step the store itself holds each job once (the head, a
record's spill part, a spill ref, the archive); once drained every job is
archived exactly once (as cancelled if a cancel answered so or marked it, as
completed if a complete answered so), no record, no ref and no spill object is
left."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from broker.errors import OsqueueError
from broker.model.job import CANCELLED, COMPLETED
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.service.broker import Broker
from broker.storage.files import FileStore
from broker.wire import CANCEL_REQUESTED
from tests.support.faults import Clock, FaultyStore
from tests.support.inprocess import archive_lines, owning_successor, run, started, stored, until
from tests.support.spill_runs import (
    FAULTS,
    GRACE_S,
    crash_soon,
    drain,
    everywhere,
    finished_archived,
    where,
)
from tests.support.spill_store import held_at_spill_parts, spill_keys
from tests.support.tiers import seeds

#: Short claims' leases (s): a clock step of ``EXPIRE_S`` runs them out.
SHORT_S = 20.0
EXPIRE_S = SHORT_S + 1
LONG_S = 3600.0
#: Broker settings besides the spills': records' spill parts as by default; the
#: held-jobs cache empty past every batch (each settlement reads its object
#: again); pushes into segments too (segment and spill parts in one record).
MODES: dict[str, dict[str, Any]] = {
    "parts": {}, "evict": {"held_cache_mb": 0}, "segments": {"segment_push_jobs": 4},
    "groups": {}}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("faulty", [False, True], ids=["clean", "faults"])
@pytest.mark.parametrize("seed", seeds(3, short=1))  # (seeds past 0: make long only)
def test_mixed_operations_on_jobs_held_at_spill_parts_keep_each_job_exactly_once(
        tmp_path: Path, seed: int, faulty: bool, mode: str) -> None:
    store = FaultyStore(FileStore(tmp_path))
    rnd = random.Random(7000 + seed)
    purging = seed % 3 == 2  # (a purge loses jobs on purpose: the others check every job)
    config = {"spill_jobs": 2, "spill_pending": True, "commit_timeout_s": 2.0,
              "segment_grace_s": GRACE_S, **MODES[mode]}

    async def go() -> None:
        clock = Clock()
        a = await started(store, clock=clock, **config)
        pushed: list[str] = []
        live: dict[str, str] = {}  # token -> id: claimed, not settled by this run
        spent: list[str] = []  # tokens settled or run out: repeats and stale tokens
        completed: set[str] = set()  # ids a complete answered completed
        cancelled: set[str] = set()  # ids a cancel answered cancelled or marked
        parts = 0  # (steps that saw jobs held at spill parts)
        for step in range(45):
            # (groups: from half-way on, claims go by groups while records hold spill parts)
            grouped = mode == "groups" and step >= 20 and rnd.random() < 0.5
            pushed += await a.push("q", [NewJob(b'{"n":%d}' % rnd.randrange(10**6),
                                                priority=rnd.randrange(3),
                                                max_attempts=rnd.choice((2, 3, 4)),
                                                group=f"g{rnd.randrange(3)}" if grouped else None)
                                         for _ in range(rnd.randrange(1, 7))])
            lease = rnd.choice((SHORT_S, LONG_S))
            request = f"c-{step}"
            try:
                got = await a.claim("q", "w", max_jobs=rnd.randrange(1, 10), lease_s=lease,
                                    request=request)
            except OsqueueError:
                got = []
            if rnd.random() < 0.2:  # (a repeat, as after a lost reply: the jobs still held)
                try:
                    again = await a.claim("q", "w", max_jobs=9, lease_s=lease, request=request)
                except OsqueueError:
                    again = []
                assert {j.token for j in again} <= {j.token for j in got} or not got
                got = [*got, *(j for j in again if j.token not in {g.token for g in got})]
            live.update((j.token, j.id) for j in got)
            tokens = list(live)
            rnd.shuffle(tokens)
            cut = [0, *sorted(rnd.randrange(len(tokens) + 1) for _ in range(4)), len(tokens)]
            fail_at, done_at, frees, beats = (tokens[cut[i]:cut[i + 1]] for i in range(4))
            fails = [FailItem(t, "boom", rnd.choice((0, 0, 1000, 30_000))) for t in fail_at]
            dones = [CompleteItem(t, b"1") for t in done_at]
            if spent and rnd.random() < 0.4:  # (repeated and stale tokens)
                dones += [CompleteItem(t, b"2") for t in rnd.sample(spent, min(3, len(spent)))]
            if dones and rnd.random() < 0.2:
                dones.append(dones[0])  # (a token twice in one call)
            calls = [a.fail("q", fails) if fails else asyncio.sleep(0),
                     a.complete("q", dones) if dones else asyncio.sleep(0),
                     a.release("q", frees) if frees else asyncio.sleep(0),
                     a.heartbeat("q", beats, lease_s=lease) if beats else asyncio.sleep(0)]
            for item in [*fails, *dones]:
                live.pop(item.token, None)
            for token in frees:
                live.pop(token, None)
            spent += [item.token for item in [*fails, *dones]] + frees
            side: list[Any] = []  # (a claim in the same batch as the settlements)

            async def side_claim(broker: Broker = a, lease_s: float = lease,
                                 into: list[Any] = side) -> None:
                into.extend(await broker.claim("q", "w4", max_jobs=rnd.randrange(1, 6),
                                               lease_s=lease_s))

            if rnd.random() < 0.5:
                calls.append(side_claim())
            pick = rnd.random()
            held_ids = list(live.values())
            if pick < 0.12:
                calls.append(a.redrive("q"))
            elif pick < 0.22:
                calls.append(a.redrive("q", rnd.sample(pushed, min(5, len(pushed)))))
            elif pick < 0.42 and held_ids:  # (a claimed job and its siblings)
                calls.append(a.cancel("q", [*rnd.sample(held_ids, min(2, len(held_ids))),
                                            *rnd.sample(pushed, min(2, len(pushed)))]))
            elif pick < 0.5 and purging:
                calls.append(a.purge("q", rnd.choice((["dead"], ["pending"], None))))
            elif pick < 0.56 and not faulty:  # (a crash mid-batch, another broker goes on)
                calls.append(crash_soon(a))
            if rnd.random() < 0.3:
                calls.append(a.sweep_staging())
            step_s = rnd.choice((0.001, 0.01, 1.5, GRACE_S, EXPIRE_S))
            clock.advance(step_s)
            if step_s == EXPIRE_S:  # (the short leases run out: their tokens go stale)
                spent += list(live)
                live.clear()
            rnd.shuffle(calls)
            if faulty and rnd.random() < 0.35:
                method, kind, key = rnd.choice(FAULTS)
                store.inject(method, kind, key_contains=key)
            out = await asyncio.gather(*calls, return_exceptions=True)
            store.heal()
            live.update((j.token, j.id) for j in side)
            if step_s == EXPIRE_S:
                spent += [j.token for j in side]
                for j in side:
                    live.pop(j.token)
            if a._stopping:
                a, ids = await owning_successor(store, clock, f"http://b{step}", **config)
                pushed += ids
            for exc in out:
                assert not isinstance(exc, BaseException) or isinstance(exc, OsqueueError), exc
            for answers in out:
                if isinstance(answers, BaseException | int) or answers is None:
                    continue
                for x in answers:
                    if hasattr(x, "id") and x.status in (CANCELLED, CANCEL_REQUESTED) and x.ok:
                        cancelled.add(x.id)
                    elif hasattr(x, "token") and x.ok and x.status == COMPLETED:
                        completed.add(x.token.split(".")[0])
            seen = everywhere(store)  # (the head loads; every ref's object read)
            assert [i for i, n in seen.items() if n > 1] == [], where(store, seen)
            parts += bool(held_at_spill_parts(store))
        done = await a.complete("q", [CompleteItem(t, b"3") for t in live])
        completed.update(x.token.split(".")[0] for x in done if x.ok and x.status == COMPLETED)
        clock.advance(LONG_S + 1)  # (every lease runs out: what a heartbeat lost is reclaimed)
        await drain(a, store, [])
        await finished_archived(a, store, clock)  # (every finished job archived: none awaits it)
        archived = Counter(rec["id"] for rec in archive_lines(store))
        assert [i for i, n in archived.items() if n > 1] == []
        statuses = {rec["id"]: rec.get("status") for rec in archive_lines(store)}
        assert {i for i in cancelled if statuses.get(i, CANCELLED) != CANCELLED} == set()
        assert {i for i in completed if statuses.get(i) != COMPLETED} == set()
        if not purging:
            assert sorted(archived) == sorted(set(pushed))
        state = stored(store)
        assert not state.claim_records and state.spill_refs == []
        assert not [j for j in state.jobs.values() if j.status not in (COMPLETED, CANCELLED)]
        await a.sweep_staging()  # (orphans of failed spills: listed, then past the grace)
        clock.advance(GRACE_S + 1)
        await a.sweep_staging()
        await until(lambda: spill_keys(store) == [])
        assert parts > 0  # (the run did hold jobs at spill parts)
        await a.stop()

    run(go(), timeout_s=180)
