"""QueueTarget.prepare with grouped segments: a batch of claims loads the
lines of only the segments its groups' next jobs are in (at most
MAX_WINDOWS held, the least lately needed evicted), every due one's
directory, and the claims drain a queue of more grouped segments than that
in fair turns, each job once, each group in push order. In-process broker
on a real file store; the store is checked afterwards."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.errors import OsqueueError
from broker.model.ops import CompleteItem, NewJob
from broker.model.state import MAX_WINDOWS, SegmentWindows
from broker.service.broker import Broker
from broker.storage.files import FileStore
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import (
    crash,
    run,
    segment_objects,
    started,
    stored,
    successor,
    until,
)

GROUPS = 10
PER_SEGMENT = 30  # 3 jobs of each group in each segment
SEGMENTS = MAX_WINDOWS + 4


def windows_of(broker: Broker) -> SegmentWindows:
    return broker._queues["q"].target.windows


def test_claims_hold_the_windows_of_the_segments_they_reach_only(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, segment_push_jobs=10, grouped_segments=True)
        for s in range(SEGMENTS):
            await a.push("q", [NewJob(orjson.dumps({"n": n}), group=f"g{n % GROUPS}")
                               for n in range(s * PER_SEGMENT, (s + 1) * PER_SEGMENT)])
        assert len(stored(store).segment_refs) == SEGMENTS
        first = await a.claim("q", "w", max_jobs=5, lease_s=60)
        assert len(first) == 5
        windows = windows_of(a)
        # every group's next job is in the first segment: its lines alone are loaded
        assert len(windows.windows) == 1
        assert len(windows.runs) == SEGMENTS  # (every directory: claims and stats)
        seen = [orjson.loads(j.payload)["n"] for j in first]
        await a.complete("q", [CompleteItem(j.token) for j in first])
        most = 1
        while len(seen) < SEGMENTS * PER_SEGMENT:
            got = await a.claim("q", "w", max_jobs=7, lease_s=60)
            assert got, f"a claim found nothing with {len(seen)} jobs claimed"
            most = max(most, len(windows.windows))
            assert len(windows.windows) <= MAX_WINDOWS
            seen += [orjson.loads(j.payload)["n"] for j in got]
            await a.complete("q", [CompleteItem(j.token) for j in got])
        assert most < SEGMENTS // 2  # (groups drained in fair turns: their heads stay together)
        assert sorted(seen) == list(range(SEGMENTS * PER_SEGMENT))  # each job once
        for g in range(GROUPS):  # each group in push order
            mine = [n for n in seen if n % GROUPS == g]
            assert mine == sorted(mine)
        assert Counter(n % GROUPS for n in seen[:GROUPS * 3]) == {g: 3 for g in range(GROUPS)}
        assert await a.claim("q", "w", max_jobs=7, lease_s=60) == []
        head = stored(store)
        assert head.segment_refs == []
        assert all(job.status == "completed" for job in head.jobs.values())
        assert head.counters.completed == SEGMENTS * PER_SEGMENT
        await until(lambda: segment_objects(store) == [])
        await a.stop()

    run(go())


def test_a_successor_whose_segment_reads_fail_changes_nothing_then_drains_each_job_once(
        tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10, grouped_segments=True)
        for s in range(SEGMENTS):
            await a.push("q", [NewJob(orjson.dumps({"n": n}), group=f"g{n % GROUPS}")
                               for n in range(s * PER_SEGMENT, (s + 1) * PER_SEGMENT)])
        done = await a.claim("q", "w", max_jobs=15, lease_s=60)
        await a.complete("q", [CompleteItem(j.token) for j in done])
        held = await a.claim("q", "w", max_jobs=4, lease_s=60)  # (left to their leases)
        await crash(a)
        b = await successor(store, clock)
        await b.stats("q")  # (the takeover's commit: the head is the successor's now)
        before = store.read(paths.state_key("q")).data
        store.inject("read", NOT_LANDED, times=None, key_contains="/segments/")
        with pytest.raises(OsqueueError):
            await b.claim("q", "w", max_jobs=7, lease_s=60)
        assert store.read(paths.state_key("q")).data == before  # nothing changed
        assert store.injected  # (the reads failed: the fault was met)
        store.heal()
        seen = [orjson.loads(j.payload)["n"] for j in done]
        while got := await b.claim("q", "w", max_jobs=7, lease_s=60):
            assert len(windows_of(b).windows) <= MAX_WINDOWS
            seen += [orjson.loads(j.payload)["n"] for j in got]
            await b.complete("q", [CompleteItem(j.token) for j in got])
        # every job once, but the 4 held by the crashed broker (still under their leases)
        assert sorted(seen + [orjson.loads(j.payload)["n"] for j in held]) == \
            list(range(SEGMENTS * PER_SEGMENT))
        head = stored(store)
        assert head.segment_refs == []
        assert head.counters.completed == SEGMENTS * PER_SEGMENT - len(held)
        assert sorted(job.seq for job in head.jobs.values() if job.status == "claimed") == \
            sorted(int(j.id[1:]) for j in held)
        await b.stop()

    run(go())


def test_groups_heading_in_more_segments_than_it_holds_are_drained_within_max_windows(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, segment_push_jobs=10, grouped_segments=True)
        for s in range(SEGMENTS):  # segment s holds group s's jobs only
            await a.push("q", [NewJob(orjson.dumps({"n": n}), group=f"s{s}")
                               for n in range(s * PER_SEGMENT, (s + 1) * PER_SEGMENT)])
        windows = windows_of(a)
        seen: list[int] = []
        ends = 0
        while len(seen) < SEGMENTS * PER_SEGMENT:
            got = await a.claim("q", "w", max_jobs=4 * SEGMENTS, lease_s=60)
            assert got, f"a claim found nothing with {len(seen)} jobs claimed"
            assert len(windows.windows) <= MAX_WINDOWS
            ends += len(got) < min(4 * SEGMENTS, SEGMENTS * PER_SEGMENT - len(seen))
            seen += [orjson.loads(j.payload)["n"] for j in got]
            await a.complete("q", [CompleteItem(j.token) for j in got])
        assert ends >= 1  # (some claim reached a segment beyond the windows held, and ended)
        assert sorted(seen) == list(range(SEGMENTS * PER_SEGMENT))  # each job once
        for s in range(SEGMENTS):  # each group in push order
            mine = [n for n in seen if n // PER_SEGMENT == s]
            assert mine == sorted(mine)
        head = stored(store)
        assert head.segment_refs == [] and head.counters.completed == SEGMENTS * PER_SEGMENT
        await a.stop()

    run(go())
