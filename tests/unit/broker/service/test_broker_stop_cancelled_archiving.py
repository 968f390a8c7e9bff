"""broker.service.broker.Broker.stop cancelled while it waits for an archive
write hanging in its thread (the archiver mid-write): the write lands after the
loop was aborted; a successor takes over and archives again: every completed job
is archived exactly once (one object per commit, written twice identically),
dropped from the head, and no spill object is left once drained and swept."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

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


def test_stop_cancelled_while_an_archive_write_hangs_archives_each_job_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        clock = Clock()
        a = await started(store, clock=clock, **CONFIG)
        pushed = await a.push("q", [NewJob(b'{"n":%d}' % i) for i in range(5)])
        entered, release, landed = held_call(store, "put", "q/archive/")
        got = await a.claim("q", "w", max_jobs=3)
        await a.complete("q", [CompleteItem(j.token) for j in got])
        await until(entered.is_set)  # (the archive object's write hangs)
        q = a._queues["q"]
        waiting, wait = asyncio.Event(), q.archiver.wait

        async def seen_wait(timeout_s: float) -> None:
            waiting.set()
            await wait(timeout_s)

        monkeypatch.setattr(q.archiver, "wait", seen_wait)
        stopping = asyncio.create_task(a.stop(drain_s=10))
        await waiting.wait()  # (stop() waits for the archive write)
        assert not stopping.done() and q.archiver.pending() == 1
        stopping.cancel()
        await asyncio.wait({stopping}, timeout=10)
        assert stopping.cancelled()
        assert q.loop._task is not None
        await asyncio.wait({q.loop._task}, timeout=10)
        assert q.loop._task.done()
        release.set()
        await until(landed.is_set)
        await crash(a)
        a._executor.shutdown()
        b, ids = await owning_successor(store, clock, "http://b", **CONFIG)
        await drain(b, store, [])
        await finished_archived(b, store, clock)
        clock.advance(GRACE_S + 1)
        await b.sweep_staging()
        assert spill_keys(store) == []
        archived = Counter(rec["id"] for rec in archive_lines(store))
        assert sorted(archived.elements()) == sorted(pushed + ids)
        await b.stop()

    run(go(), timeout_s=60)
