"""Pushes large in bytes go into segment objects, not the queue object
(broker.service.by_reference.wanted, ``segment_push_bytes``): from the client
(batched or one job at a time), with shared options, and a Spark publish of
few rows; so the head stays small. The failure paths inject a failed segment
write and a crash between the segment write and its commit, and check the
store: every job once, no segment left once swept."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker import paths
from broker.errors import OsqueueError
from broker.model.job import PENDING
from broker.model.ops import CompleteItem, NewJob, Push, PushPayloads
from broker.service.by_reference import wanted
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import (
    crash,
    payloads,
    run,
    segment_objects,
    stage_all,
    started,
    stored,
    successor,
)
from tests.support.pause import SkippedPause
from tests.support.spill_store import spilled_ids

BLOB = "x" * 200_000  # a 200 KB payload (the queue's limit is 256 KiB)


def _head_bytes(root: Path, queue: str = "q") -> int:
    return os.path.getsize(root / paths.state_key(queue))


def test_big_payloads_from_the_client_leave_the_head_under_a_megabyte(tmp_path: Path) -> None:
    """400 jobs of 200 KB in one push_many (on today's main: one 80 MB request,
    refused past the 64 MiB limit), then 30 single pushes and a push with
    options: the head stays under 1 MB and every job is there once."""
    with BrokerProcess(f"file://{tmp_path}") as broker:
        client = QueueClient(broker.url, "q", retry_s=10)
        ids = client.push_many([{"n": i, "blob": BLOB} for i in range(400)])
        assert len(set(ids)) == 400
        ids += [client.push({"n": 400 + i, "blob": BLOB}) for i in range(30)]
        urgent = client.push({"n": "urgent", "blob": BLOB}, priority=5)
        later = client.push({"n": "later", "blob": BLOB}, priority=9, delay_s=3600)
        assert _head_bytes(tmp_path) < 1_000_000
        state = stored(FileStore(tmp_path))
        assert sum(ref.count for ref in state.segment_refs) == 432 and len(state.jobs) == 0
        assert client.stats()["counts"]["pending"] == 432
        assert client.job(later)["run_at"] > client.job(urgent)["run_at"]
        (first,) = client.claim("w", 1)  # priority 5 first; the priority-9 one is not due
        assert first.id == urgent and first.payload["blob"] == BLOB
        seen = []
        while jobs := client.claim("w", 50):
            seen += [j.payload["n"] for j in jobs]
            client.complete_many([(j.token, None) for j in jobs])
        assert sorted(seen) == list(range(430))
        client.complete(first.token)
        # (a claimed job is in the head, and a completed one until archived: then gone)
        eventually(lambda: _head_bytes(tmp_path) < 1_000_000, what="completed jobs archived")


def test_a_push_of_keyed_jobs_stays_in_the_head(tmp_path: Path) -> None:
    """A job with an idempotency key never goes into a segment: its key stays in
    the queue object's key window, the job in the queue object or (spill_pending,
    past spill_bytes) in a pending spill object it references, once, and a
    repeat of the push answers the same ids."""
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store)
        try:
            jobs = [NewJob(b'"%s"' % (b"k" * 100_000), key=f"k-{i}") for i in range(3)]
            ids = await a.push("q", jobs)
            state = stored(store)
            assert state.segment_refs == [] and sorted(state.keys) == ["k-0", "k-1", "k-2"]
            inline = [job.id for job in state.jobs.touched()]
            assert sorted(inline + spilled_ids(store, kind=PENDING)) == sorted(ids)
            assert list(await a.push("q", jobs)) == list(ids)
        finally:
            await a.stop(5)

    run(go())


def test_a_small_publish_of_big_rows_goes_into_a_segment(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    rows = b"".join(b'\t{"n":%d,"blob":"%s"}\n' % (i, BLOB.encode()) for i in range(20))

    async def go() -> None:
        a = await started(store)
        try:
            keep = await stage_all(a, "q", [rows])
            assert (await a.publish("q", "w-1/", keep, "once-1"))["published"] == 20
            state = stored(store)
            assert [ref.count for ref in state.segment_refs] == [20] and len(state.jobs) == 0
            assert sorted(p["n"] for p in payloads(store)) == list(range(20))
        finally:
            await a.stop(5)

    run(go())


def _ns(store: FaultyStore) -> list[int]:
    return sorted(p["n"] for p in payloads(store))


def _big(n: int, start: int = 0) -> list[NewJob | bytes]:
    return [b'{"n":%d,"blob":"%s"}' % (i, b"y" * 40_000) for i in range(start, start + n)]


def test_a_failed_segment_write_of_a_big_push_pushes_nothing_and_a_retry_pushes_once(
        tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock)
        try:
            await a.push("q", _big(1))  # (40 KB: under the 64 KiB of segment_push_bytes)
            assert segment_objects(store) == [] and len(stored(store).jobs) == 1
            store.inject("create_if_absent", NOT_LANDED, key_contains="/segments/")
            with pytest.raises(OsqueueError) as failed:
                await a.push("q", _big(3, 1), request="r-1")
            assert failed.value.retryable
            assert _ns(store) == [0] and segment_objects(store) == []
            await a.push("q", _big(3, 1), request="r-1")  # the caller's retry
            assert _ns(store) == [0, 1, 2, 3]
            assert len(segment_objects(store)) == 1 == len(stored(store).segment_refs)
        finally:
            await a.stop(5)

    run(go())


def test_a_crash_between_a_big_pushs_segment_write_and_its_commit(tmp_path: Path) -> None:
    """The segment object landed, the commit that references it did not, and the
    broker died: the successor's sweep deletes the object; the caller's retry
    pushes every job once."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        # (the refs' commit fails for commit_timeout_s: its backoff skipped on a pause)
        a = await started(store, clock=clock, pause=SkippedPause())
        await a.push("q", _big(1))
        # the reservation is the next write of the head, the refs' commit the one after
        store.inject("write_if_match", NOT_LANDED, nth=2, times=None,
                     key_contains=paths.state_key("q"))
        with pytest.raises(OsqueueError):
            await a.push("q", _big(4, 1), request="r-1")
        assert len(segment_objects(store)) == 1 and stored(store).segment_refs == []
        await crash(a)
        store.heal()
        b = await successor(store, clock)
        try:
            await b.sweep_staging()
            clock.advance(601)
            await b.sweep_staging()
            assert segment_objects(store) == []  # (unreferenced past the grace: deleted)
            assert _ns(store) == [0]
            await b.push("q", _big(4, 1), request="r-1")
            assert _ns(store) == [0, 1, 2, 3, 4]
            jobs = await b.claim("q", "w", 10)
            await b.complete("q", [CompleteItem(j.token) for j in jobs])
            assert sorted(j.id for j in jobs) == sorted({j.id for j in jobs})
        finally:
            await b.stop(5)

    run(go())


def test_which_pushes_go_by_reference() -> None:
    """By job count or by payload bytes; jobs sharing their options, none with a
    key, options in range; never a push of refs already or with chunks missing."""
    big, small = b'"%s"' % (b"b" * 70_000), b"1"
    assert wanted(PushPayloads((big,)), 10_000, 65_536)
    assert not wanted(PushPayloads((small,) * 9_999), 10_000, 65_536)
    assert wanted(PushPayloads((small,) * 10_000), 10_000, 65_536)
    assert not wanted(PushPayloads((big,)), 10_000, 0)  # (not by size)
    assert not wanted(PushPayloads((big,)), 0, 65_536)  # (no push by reference)
    assert not wanted(PushPayloads((big,), missing=1), 10_000, 65_536)
    assert wanted(Push((NewJob(big, priority=3, delay_ms=5), NewJob(small, 3, 5))), 10, 65_536)
    assert not wanted(Push((NewJob(big, priority=3), NewJob(small))), 10, 65_536)  # mixed
    assert not wanted(Push((NewJob(big, key="k"),)), 10, 65_536)
    assert not wanted(Push((NewJob(big, priority=10**9),)), 10, 65_536)  # (refused inline)
