"""broker.service.archiver over completions held in claim records (brokers with
``held_in_records``): the archive object of a commit that completed segment-held
jobs (done entries, no lines) holds their payloads, read from the held-jobs
cache by the owner or from the segment by a successor with an empty cache, in
the same bytes either way; every job archived once, its done entry dropped
after, and the segment deleted only once its last record left the head. And
the successor fails segment-held jobs of the first owner's claim (its cache
miss loaded by prepare). In-process brokers on a file store with injected
faults: a segment missing at load, a lost reply on the complete commit."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.errors import OsqueueError
from broker.model import held
from broker.model.claim_records import ClaimRecord, Done
from broker.model.format import archive
from broker.model.job import Job
from broker.model.ops import CompleteItem, FailItem
from broker.model.state import QueueState
from broker.service.archiver import Archiver
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, started, stored, successor, until

OBJECTS = paths.archive_prefix("q")
CONFIG = {"held_in_records": True, "segment_push_jobs": 10}


def _from_cache(state: QueueState, record: ClaimRecord, entry: Done, i: int) -> Job:
    """The owner's completed job ``i`` of ``entry``, its line from its cache."""
    span = record.seg_span(entry.pos[i])
    assert span is not None
    got = state.held.line(record.fence, span, entry.pos[i] - span[0])
    assert got is not None  # (the owner claimed it: its line is cached)
    return held.done_job(record, entry, i, *got)


def test_a_successor_with_an_empty_cache_writes_the_same_archive_bytes(
        tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))
    store.inject("put", NOT_LANDED, times=None, key_contains=OBJECTS)  # the owner's never land

    async def main() -> None:
        a = await started(store, clock=clock, **CONFIG)
        ids = await a.push("q", [b'{"n":%d}' % i for i in range(30)])
        assert stored(store).segment_refs and not stored(store).jobs  # (in a segment)
        jobs = await a.claim("q", "w", 30)
        await a.complete("q", [CompleteItem(j.token, b'{"r":%d}' % i)
                               for i, j in enumerate(jobs)])
        head = stored(store)
        assert not list(head.jobs.touched()) and head.done_commits  # done entries, no lines
        await until(lambda: a._queues["q"].archiver.failures > 0)
        # what the owner would have written: its jobs from its cache
        state = a._queues["q"].loop.state  # type: ignore[attr-defined]
        [(seq, _)] = head.done_commits.items()
        mine = [_from_cache(state, r, e, i) for r, e in held.done_entries(state, seq)
                for i in range(len(e.pos))]
        want_key, want = archive.commit_object("q", mine)
        await crash(a)
        store.heal()
        b = await successor(store, clock)
        try:
            await until(lambda: not stored(store).claim_records)
            assert store.list(OBJECTS) == [want_key]
            assert store.get(want_key) == want  # the same bytes, payloads read from the segment
            rows = archive_lines(store)
            assert Counter(r["id"] for r in rows) == Counter(ids)
            assert [r["payload"] for r in rows] == [{"n": i} for i in range(30)]
            await until(lambda: store.list(paths.segments_prefix("q")) == [])
            assert stored(store).segment_refs == []
        finally:
            await b.stop(5)

    run(main())


def test_a_successor_fails_jobs_held_in_the_first_owners_record(tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **CONFIG)
        await a.push("q", [b'{"n":%d}' % i for i in range(20)])
        jobs = await a.claim("q", "w", 20, lease_s=600)
        await crash(a)
        b = await successor(store, clock)
        try:
            got = await b.fail("q", [FailItem(j.token, "boom", 0) for j in jobs[:5]])
            assert [(x.ok, x.status) for x in got] == [(True, "pending")] * 5
            head = stored(store)
            lines = {j.seq: j for j in head.jobs.touched()}
            assert sorted(lines) == list(range(1, 6))
            assert [orjson.loads(j.payload) for j in lines.values()] == [
                {"n": i} for i in range(5)]
            assert all(j.last_error == "boom" and j.attempts == 1 for j in lines.values())
            assert head.count_by_status()["claimed"] == 15
        finally:
            await b.stop(5)

    run(main())


def test_a_segment_a_record_names_missing_at_load_is_refused_and_nothing_written(
        tmp_path: Path) -> None:
    """Every job of a segment claimed (its ref exhausted, kept because a record
    names it) and the object gone: the next broker to load the head refuses the
    queue naming the object, and writes nothing."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **CONFIG)
        await a.push("q", [b'{"n":%d}' % i for i in range(10)])
        jobs = await a.claim("q", "w", 10, lease_s=600)
        [ref] = stored(store).segment_refs
        assert ref.exhausted and len(jobs) == 10
        await crash(a)
        store.inner.delete(ref.key)
        before = store.read(paths.state_key("q")).data
        b = await successor(store, clock)
        try:
            with pytest.raises(OsqueueError) as err:
                await b.complete("q", [CompleteItem(jobs[0].token, None)])
            assert err.value.code == "segment_missing" and ref.key in str(err.value)
            assert store.read(paths.state_key("q")).data == before
        finally:
            await b.stop(5)

    run(main())


def test_a_lost_reply_on_the_complete_commit_is_answered_completed_by_its_repeat(
        tmp_path: Path) -> None:
    """The commit of a complete of held jobs lands but the store's reply is lost
    (the loop reads the head back: landed), and the client, which did not hear,
    repeats it while its archive object cannot land: answered completed from the
    done entries; each job is archived once."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **CONFIG)
        try:
            ids = await a.push("q", [b'{"n":%d}' % i for i in range(12)])
            jobs = await a.claim("q", "w", 12, lease_s=600)
            items = [CompleteItem(j.token, b'{"r":1}') for j in jobs]
            store.inject("put", NOT_LANDED, times=None, key_contains=OBJECTS)  # (kept in done)
            store.inject("write_if_match", LOST_REPLY, key_contains="q/queue.json")
            first = await a.complete("q", items)  # (the loop reads back: it landed)
            assert ("write_if_match", LOST_REPLY, "q/queue.json") in store.injected
            assert [(x.ok, x.status) for x in first] == [(True, "completed")] * 12
            assert stored(store).done_commits and not list(stored(store).jobs.touched())
            again = await a.complete("q", items)  # its client never heard: a repeat
            assert [(x.ok, x.status) for x in again] == [(True, "completed")] * 12
            assert stored(store).done_commits  # (answered from the done entries)
            store.heal()
            await until(lambda: not stored(store).claim_records)
            assert Counter(r["id"] for r in archive_lines(store)) == Counter(ids)
        finally:
            await a.stop(5)

    run(main())


def test_a_done_entry_naming_a_segment_the_head_lacks_is_a_counted_retried_failure(
        tmp_path: Path) -> None:
    """A head whose record holds completed jobs of a segment it no longer
    references (a corrupt head: nothing writes one today) makes the archive write
    fail as ``corrupt_state``, counted and retried with backoff like any failed
    archive write, naming the segment; its task does not end on a bare KeyError
    that nothing sees, and nothing is archived."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))
    store.inject("put", NOT_LANDED, times=None, key_contains=OBJECTS)  # (done entries stay)

    async def main() -> None:
        a = await started(store, clock=clock, **CONFIG)
        await a.push("q", [b'{"n":%d}' % i for i in range(12)])
        jobs = await a.claim("q", "w", 12, lease_s=600)
        await a.complete("q", [CompleteItem(j.token, None) for j in jobs])
        await crash(a)
        store.heal()
        head = stored(store)
        [ref] = head.segment_refs
        assert head.done_commits
        head.segment_refs = []  # (the corruption)
        with ThreadPoolExecutor(1) as pool:
            archiver = Archiver(store, "q", pool, lambda: None, monotonic=clock.monotonic,
                                segments=None)
            archiver.committed(head)
            try:
                await until(lambda: archiver.failures >= 1)
                assert archiver.last_error is not None and ref.key in archiver.last_error
                assert archiver.pending() == 1  # (still retrying)
                assert store.list(OBJECTS) == []
            finally:
                archiver.cancel()

    run(main())
