"""broker.service.queue_target across an owner killed with a head write in flight:
the complete's write is in the executor's thread when the owner's loop is
cancelled, and lands only after a successor has read the head. The completer
is told the outcome is unknown; the successor takes over once the dead owner's
record runs out, drains the queue (spilled dead jobs redriven) and sweeps.
Afterwards every job is archived exactly once and no spill object is left."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from broker.errors import OutcomeUnknown
from broker.model.ops import CompleteItem, NewJob
from broker.storage.files import FileStore
from tests.support.faults import Clock, FaultyStore, held_call
from tests.support.inprocess import archive_lines, crash, owning_successor, run, started, until
from tests.support.spill_runs import GRACE_S, drain, finished_archived
from tests.support.spill_store import spill_keys

CONFIG = {"spill_jobs": 2, "spill_pending": True, "segment_grace_s": GRACE_S}
LEASE_S = 20.0
HEAD = "q/queue.json"


def assert_(ok: bool) -> None:
    assert ok, "the dead owner's write did not land in time"


def test_an_owner_killed_with_a_complete_in_flight_loses_and_duplicates_nothing(
        tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        clock = Clock()
        a = await started(store, clock=clock, **CONFIG)
        pushed = await a.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=1) for i in range(6)])
        held = [j.token for j in await a.claim("q", "w", max_jobs=6, lease_s=LEASE_S)]
        entered, release, landed = held_call(store, "write_if_match", HEAD)
        call = asyncio.ensure_future(a.complete("q", [CompleteItem(t) for t in held[:3]]))
        await until(entered.is_set)  # (the complete's write is in its thread)
        await crash(a)
        [got] = await asyncio.gather(call, return_exceptions=True)
        assert isinstance(got, OutcomeUnknown), got
        # (the dead owner's write lands once the successor has read the head, and
        # before the successor's first head write: that write waits for it, or the
        # dead write could lose the race and get a 412, never landing)
        store.inject("read", None, key_contains=HEAD, after=lambda _k: release.set())
        store.inject("write_if_match", None, key_contains=HEAD,
                     before=lambda _k: assert_(landed.wait(20)))
        b, ids = await owning_successor(store, clock, "http://b", **CONFIG)
        assert release.is_set()
        await until(landed.is_set)  # (it did land: over the head the successor read)
        pushed += ids
        await b.complete("q", [CompleteItem(t) for t in held[:3]])  # (the retry)
        clock.advance(LEASE_S + 1)  # (the other leases run out: reclaimed, dead, spilled)
        await drain(b, store, [])
        await finished_archived(b, store, clock)
        await b.sweep_staging()
        clock.advance(GRACE_S + 1)
        await b.sweep_staging()
        await until(lambda: spill_keys(store) == [])
        archived = Counter(rec["id"] for rec in archive_lines(store))
        assert sorted(archived.elements()) == sorted(pushed)
        await b.stop()
        a._executor.shutdown(wait=True)

    run(go(), timeout_s=60)
