"""broker.service.broker.Broker.stop while a push's head write hangs in its thread
past the drain time: stop() cancels the loop, the push is answered
``OutcomeUnknown`` (not ``BrokerUnavailable``: its write may land), the write
then lands. A successor takes over; the client repeats the push under its
request key and gets the same ids: the job exists once, archived once, and
no spill object is left."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from broker.errors import OutcomeUnknown
from broker.model.ops import CompleteItem, NewJob
from broker.storage.files import FileStore
from tests.support.faults import Clock, FaultyStore, held_call
from tests.support.inprocess import archive_lines, owning_successor, run, started, until
from tests.support.spill_runs import GRACE_S, drain, finished_archived
from tests.support.spill_store import spill_keys

CONFIG = {"spill_jobs": 2, "spill_pending": True, "segment_grace_s": GRACE_S}
HEAD = "q/queue.json"


def test_a_push_in_flight_when_stop_times_out_is_answered_unknown_and_repeats_once(
        tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        clock = Clock()
        a = await started(store, clock=clock, **CONFIG)
        first = await a.push("q", [NewJob(b'{"n":0}')])
        entered, release, landed = held_call(store, "write_if_match", HEAD)
        jobs = [NewJob(b'{"n":1}'), NewJob(b'{"n":2}')]
        call = asyncio.ensure_future(a.push("q", jobs, request="r-1"))
        await until(entered.is_set)
        await a.stop(drain_s=0.3)  # (the write still hangs: the loop is cancelled)
        [got] = await asyncio.gather(call, return_exceptions=True)
        assert isinstance(got, OutcomeUnknown), got
        release.set()
        await until(landed.is_set)  # (the write landed after all)
        b, ids = await owning_successor(store, clock, "http://b", **CONFIG)
        again = await b.push("q", jobs, request="r-1")  # (the client's repeat)
        got_jobs = await b.claim("q", "w", max_jobs=10)
        assert sorted(j.id for j in got_jobs) == sorted(first + again + ids)
        await b.complete("q", [CompleteItem(j.token) for j in got_jobs])
        await drain(b, store, [])
        await finished_archived(b, store, clock)
        clock.advance(GRACE_S + 1)
        await b.sweep_staging()
        assert spill_keys(store) == []
        archived = Counter(rec["id"] for rec in archive_lines(store))
        assert sorted(archived.elements()) == sorted(first + again + ids)
        await b.stop()

    run(go(), timeout_s=60)
