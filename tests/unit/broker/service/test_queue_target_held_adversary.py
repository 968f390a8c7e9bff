"""broker.service.queue_target's held-jobs cache under pressure (brokers with
``held_in_records`` and a cache smaller than the claims it holds): every job a
batch settles keeps its line through the batch, whichever records prepare had to
load and whichever it found loaded; the store checked afterwards (each job once).
In-process brokers on a file store."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from broker.model.ops import FailItem
from broker.storage import FileStore
from tests.support.faults import Clock, FaultyStore
from tests.support.inprocess import run, segment_payloads, started, stored

#: a cache of 1 MiB, claims of ~600 KiB each: the second claim's lines push the first's out
CONFIG = {"held_in_records": True, "segment_push_jobs": 10, "held_cache_mb": 1}
PAD = "x" * 1000


def _bodies(n: int) -> list[bytes]:
    return [b'{"n":%d,"pad":"%s"}' % (i, PAD.encode()) for i in range(n)]


def test_a_fail_of_two_records_keeps_the_loaded_ones_line_while_loading_the_other(
        tmp_path: Path) -> None:
    """Record A's lines were pushed out of the cache by record B's claim; a fail of
    jobs of both loads A, which must not push out B (loaded, needed by the same
    batch): every job fails back to pending, none answered stale."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **CONFIG)
        try:
            await a.push("q", _bodies(1200))
            first = await a.claim("q", "w", 600, lease_s=600)
            second = await a.claim("q", "w", 600, lease_s=600)
            assert len(first) == len(second) == 600
            mine = [first[0], second[0]]
            got = await a.fail("q", [FailItem(j.token, "boom", 0) for j in mine])
            assert [(x.ok, x.status) for x in got] == [(True, "pending")] * 2, got
            head = stored(store)
            assert head.count_by_status()["pending"] == 2
            assert head.count_by_status()["claimed"] == 1198
            lines = Counter(j.id for j in head.jobs.values())
            assert lines == Counter(j.id for j in mine)
            assert segment_payloads(store, head) == []
        finally:
            await a.stop(5)

    run(main())


def test_a_claim_batched_with_a_fail_keeps_the_failed_records_line(tmp_path: Path) -> None:
    """A claim and a fail of an earlier record's jobs in one batch: the claim's
    lines, put in the cache as it applies, must not push out the lines of the
    record the fail settles (loaded already, so prepare read nothing for it)."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **CONFIG)
        try:
            await a.push("q", _bodies(1200))
            first = await a.claim("q", "w", 600, lease_s=600)
            # (the claim first in the batch: its lines go in before the fail applies)
            second, got = await asyncio.gather(
                a.claim("q", "w", 600, lease_s=600),
                a.fail("q", [FailItem(j.token, "boom", 0) for j in first[:3]]))
            assert len(second) == 600
            assert [(x.ok, x.status) for x in got] == [(True, "pending")] * 3, got
            head = stored(store)
            assert head.count_by_status()["pending"] == 3
            assert head.count_by_status()["claimed"] == 1197
            assert Counter(j.id for j in head.jobs.values()) == Counter(
                j.id for j in first[:3])
        finally:
            await a.stop(5)

    run(main())
