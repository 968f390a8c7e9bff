"""broker.service.broker.Broker.stop cancelled while its flush waits behind a head
write hanging in its thread (a push under a request key), with another push
(no request key) and stop()'s own ClearBroker buffered behind it. The loop is
aborted: the push in flight is answered ``OutcomeUnknown`` (its write lands
afterwards), the buffered push ``BrokerUnavailable`` and never written. A
successor takes over; the client repeats the first push under its key (the
same ids) and the second as a new push: every job exists once, archived once,
and no spill object is left once drained and swept."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from broker.errors import BrokerUnavailable, OutcomeUnknown
from broker.model.ops import CompleteItem, NewJob
from broker.storage.files import FileStore
from tests.support.faults import Clock, FaultyStore, held_call
from tests.support.inprocess import (
    archive_lines,
    crash,
    owning_successor,
    run,
    started,
    until,
)
from tests.support.spill_runs import GRACE_S, drain, finished_archived
from tests.support.spill_store import spill_keys

CONFIG = {"spill_jobs": 2, "spill_pending": True, "segment_grace_s": GRACE_S}
HEAD = "q/queue.json"


def test_stop_cancelled_behind_a_write_in_flight_loses_and_duplicates_nothing(
        tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        clock = Clock()
        a = await started(store, clock=clock, **CONFIG)
        first = await a.push("q", [NewJob(b'{"n":0}')])
        entered, release, landed = held_call(store, "write_if_match", HEAD)
        jobs = [NewJob(b'{"n":1}'), NewJob(b'{"n":2}')]
        keyed = asyncio.ensure_future(a.push("q", jobs, request="r-1"))
        await until(entered.is_set)
        buffered = asyncio.ensure_future(a.push("q", [NewJob(b'{"n":3}')]))
        stopping = asyncio.create_task(a.stop(drain_s=10))
        loop = a._queues["q"].loop
        await until(lambda: len(loop._buffer) == 2)  # (the push and stop()'s ClearBroker)
        stopping.cancel()
        await asyncio.wait({stopping}, timeout=10)
        assert stopping.cancelled()
        got = await asyncio.gather(keyed, buffered, return_exceptions=True)
        assert isinstance(got[0], OutcomeUnknown), got
        assert isinstance(got[1], BrokerUnavailable), got
        assert loop._task is not None
        await asyncio.wait({loop._task}, timeout=10)
        assert loop._task.done()
        release.set()
        await until(landed.is_set)  # (the write in flight landed after all)
        await crash(a)
        a._executor.shutdown()
        b, ids = await owning_successor(store, clock, "http://b", **CONFIG)
        again = await b.push("q", jobs, request="r-1")  # (the client's repeat)
        retried = await b.push("q", [NewJob(b'{"n":3}')])  # (told: not written)
        got_jobs = await b.claim("q", "w", max_jobs=20)
        every = sorted(first + again + retried + ids)
        assert sorted(j.id for j in got_jobs) == every
        await b.complete("q", [CompleteItem(j.token) for j in got_jobs])
        await drain(b, store, [])
        await finished_archived(b, store, clock)
        clock.advance(GRACE_S + 1)
        await b.sweep_staging()
        assert spill_keys(store) == []
        archived = Counter(rec["id"] for rec in archive_lines(store))
        assert sorted(archived.elements()) == every
        await b.stop()

    run(go(), timeout_s=60)
