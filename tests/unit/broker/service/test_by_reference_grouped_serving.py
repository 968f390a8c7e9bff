"""Grouped segments served beside everything else (``grouped_segments`` on
for the pushes): priority across inline jobs and grouped segments, a delayed
grouped segment under a limit, a purge of a half-taken one, and a successor
broker without the flag that serves (and deletes) what the first one wrote.
In-process brokers on a real file store; the store is checked afterwards."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson

from broker.model.ops import CompleteItem, NewJob
from broker.storage.files import FileStore
from tests.support.faults import Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, segment_objects, started, stored


def jobs_of(n: int, groups: int, start: int = 0, **options: int) -> list[NewJob]:
    return [NewJob(orjson.dumps({"n": i}), group=f"g{i % groups}", **options)
            for i in range(start, start + n)]


def group_of(payload: bytes, groups: int) -> str:
    return f"g{orjson.loads(payload)['n'] % groups}"


def test_priority_comes_first_across_inline_jobs_and_grouped_segments(tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, segment_push_jobs=10, grouped_segments=True)
        low = await a.push("q", jobs_of(3, 1))  # (3 jobs: inline)
        high = await a.push("q", jobs_of(30, 3, start=100, priority=9))  # a grouped segment
        mid = await a.push("q", jobs_of(1, 1, start=200, priority=5))
        assert len(stored(store).segment_refs) == 1 and len(segment_objects(store)) == 1
        got = [j.id for j in await a.claim("q", "w", max_jobs=31, lease_s=60)]
        assert set(got[:30]) == set(high) and got[30:] == list(mid)
        later = await a.push("q", jobs_of(20, 2, start=300, priority=9, delay_ms=10_000))
        assert {j.id for j in await a.claim("q", "w", max_jobs=50, lease_s=60)} == set(low)
        assert not set(later) & {j.id for j in stored(store).jobs.values()}  # still in segments
        await a.stop()

    run(go())


def test_a_delayed_grouped_segment_is_claimed_when_due_within_the_limit(tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10, grouped_segments=True)
        await a.create_queue("q", {"group_limit": 1})
        ids = await a.push("q", jobs_of(40, 4, delay_ms=10_000))
        assert await a.claim("q", "w", max_jobs=50, lease_s=60) == []
        clock.advance(11)
        seen: list[str] = []
        while got := await a.claim("q", "w", max_jobs=50, lease_s=60):
            groups = Counter(group_of(j.payload, 4) for j in got)
            assert max(groups.values()) == 1, groups  # one of each group at a time
            seen += [j.id for j in got]
            await a.complete("q", [CompleteItem(j.token) for j in got])
        assert sorted(seen) == sorted(ids)
        await a.stop()

    run(go())


def test_a_purge_of_a_half_taken_grouped_segment_keeps_the_claimed_jobs(tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10, grouped_segments=True)
        await a.create_queue("q", {"group_limit": 2})
        ids = await a.push("q", jobs_of(100, 5))
        held = await a.claim("q", "w", max_jobs=7, lease_s=60)
        cancels = await a.cancel("q", [ids[50], ids[51]])
        assert [c.status for c in cancels] == ["cancelled", "cancelled"]
        assert await a.purge("q") == 100 - 7 - 2
        assert await a.claim("q", "w", max_jobs=50, lease_s=60) == []
        done = await a.complete("q", [CompleteItem(j.token) for j in held])
        assert all(r.ok for r in done)
        head = stored(store)
        assert head.segment_refs == []
        # (finished jobs leave the head once the archiver has them: it may already have run)
        statuses = {j.id: j.status for j in head.jobs.values()}
        statuses.update({r["id"]: r["status"] for r in archive_lines(store)})
        assert Counter(statuses.values()) == {"completed": 7, "cancelled": 2}
        for _ in range(3):  # the dropped segment is deleted once its drop landed
            clock.advance(120)
            await a.sweep_staging()
        assert segment_objects(store) == []
        await a.stop()

    run(go())


def test_a_successor_without_the_flag_serves_the_grouped_segments(tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10, grouped_segments=True)
        await a.create_queue("q", {"group_limit": 2})
        ids = await a.push("q", jobs_of(100, 5))
        first = await a.claim("q", "wa", max_jobs=7, lease_s=60)
        await a.complete("q", [CompleteItem(j.token) for j in first[:3]])
        await crash(a)
        b = await started(store, "http://b", clock, segment_push_jobs=10,
                          grouped_segments=False)
        clock.advance(31)
        await b.watch()
        clock.advance(61)  # the 4 jobs a still held: leases out, pending again
        seen = [j.id for j in first[:3]]
        while got := await b.claim("q", "wb", max_jobs=9, lease_s=600):
            assert max(Counter(group_of(j.payload, 5) for j in got).values()) <= 2
            seen += [j.id for j in got]
            await b.complete("q", [CompleteItem(j.token) for j in got])
        assert sorted(seen) == sorted(ids)  # every job once (a's 4 held ones by b)
        assert stored(store).segment_refs == []
        for _ in range(3):
            clock.advance(120)
            await b.sweep_staging()
        assert segment_objects(store) == []
        await b.stop()

    run(go())
