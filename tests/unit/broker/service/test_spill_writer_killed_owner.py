"""broker.service.spill_writer across a killed owner: the owner is killed just as a
push wakes its commit loop (the push and the kill in one turn of the event
loop), a successor takes the queue over, every lease runs out, the successor
drains the queue and sweeps. The killed owner's loop must have ended with it:
woken again (as its timer would, leases expired in its stale head), it would
reclaim those jobs and spill them into objects no head references, written
after the successor's sweep and left behind for good (what the spill parts
adversary runs hit about once in eight). Afterwards no spill object is left
and every job is archived exactly once."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from broker.errors import OsqueueError
from broker.model.ops import NewJob
from broker.storage.files import FileStore
from tests.support.faults import Clock, FaultyStore
from tests.support.inprocess import (
    archive_lines,
    crash,
    owning_successor,
    run,
    started,
    until,
)
from tests.support.parked import parked_wakes, wake_of
from tests.support.spill_runs import GRACE_S, drain, finished_archived
from tests.support.spill_store import spill_keys

CONFIG = {"spill_jobs": 2, "spill_pending": True, "segment_grace_s": GRACE_S}
LEASE_S = 20.0


def test_an_owner_killed_as_its_loop_wakes_leaves_no_spill_object(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FaultyStore(FileStore(tmp_path))
    parked_wakes(monkeypatch)  # (to see the owner's loop idle)

    async def go() -> None:
        clock = Clock()
        a = await started(store, clock=clock, **CONFIG)
        pushed = await a.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=1) for i in range(6)])
        assert len(await a.claim("q", "w", max_jobs=6, lease_s=LEASE_S)) == 6
        old = a._queues["q"].loop
        await wake_of(old).waiting.wait()  # (idle)
        late = asyncio.ensure_future(a.push("q", [NewJob(b'"late"')]))
        await asyncio.sleep(0)  # (the push ran: buffered, the loop woken)
        await crash(a)  # (in the same turn)
        [got] = await asyncio.gather(late, return_exceptions=True)
        if not isinstance(got, BaseException):
            pushed += got  # (written before the kill: a job all the same)
        else:
            assert isinstance(got, OsqueueError), got
        b, ids = await owning_successor(store, clock, "http://b", **CONFIG)
        pushed += ids
        clock.advance(LEASE_S + 1)  # (every lease runs out: reclaimed, dead, spilled)
        await drain(b, store, [])
        await finished_archived(b, store, clock)
        await b.sweep_staging()
        clock.advance(GRACE_S + 1)
        await b.sweep_staging()
        await until(lambda: spill_keys(store) == [])
        old.poke()  # (as its timer would: the killed owner's head says leases ran out)
        task = old._task
        assert task is not None
        await until(lambda: task.done() or not old.active)
        assert spill_keys(store) == []
        archived = Counter(rec["id"] for rec in archive_lines(store))
        assert sorted(archived.elements()) == sorted(pushed)
        await b.stop()

    run(go(), timeout_s=60)
