"""Failure paths of the archive's index (broker.service.archiver: index entries
and the start marker before each archive object): a write that fails, a crash
between the commit and the archive writes or between the index and the
object. Each test checks the store afterwards: every finished job in exactly
one archive object, its index entry there, and found by id throughout (in
the queue object until it left it, then in the archive)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from broker import paths
from broker.model.ops import CompleteItem
from broker.storage import FileStore
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import (
    archive_lines,
    archived_and_dropped,
    crash,
    run,
    started,
    stored,
    successor,
    until,
)

OBJECTS = paths.archive_prefix("q")  # ("q/archive/": not the index's "q/archive-index/")


def _once(store: FaultyStore, ids: list[str]) -> None:
    """Each of ``ids`` is in exactly one archive object, once, and no other job is."""
    assert Counter(rec["id"] for rec in archive_lines(store)) == Counter(ids)


def _indexed(store: FaultyStore) -> list[str]:
    return [k for k in store.list(paths.archive_index_prefix("q")) if "/start/" not in k]


def test_a_failing_index_write_keeps_the_job_in_the_queue_object_until_it_lands(
        tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))
    store.inject("put", NOT_LANDED, times=None, key_contains="/archive-index/b")

    clock = Clock()  # (the drop of archived jobs waits a second on it: the test moves it)

    async def main() -> None:
        a = await started(store, clock=clock)
        try:
            ids = await a.push("q", [b'{"n":1}', b'{"n":2}'])
            jobs = await a.claim("q", "w", 2)
            await a.complete("q", [CompleteItem(j.token, b"7") for j in jobs])
            await until(lambda: a._queues["q"].archiver.failures >= 2)
            assert store.list(paths.archive_prefix("q")) == []  # (never before its entries)
            got = await a.job("q", ids[0])
            assert (got["location"], got["status"]) == ("queue", "completed")
            store.heal()
            await archived_and_dropped(a, store, clock, deleted=False)
            for job_id in ids:
                got = await a.job("q", job_id)
                assert (got["location"], got["status"]) == ("archive", "completed")
            _once(store, ids)
            assert len(_indexed(store)) == 1
        finally:
            await a.stop(5)

    run(main())


def test_a_crash_between_the_index_and_the_object_is_archived_once_by_the_successor(
        tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))
    store.inject("put", NOT_LANDED, times=None, key_contains=OBJECTS)

    async def main() -> None:
        a = await started(store, clock=clock)
        ids = await a.push("q", [b'{"n":1}', b'{"n":2}', b'{"n":3}'])
        jobs = await a.claim("q", "w", 2)
        await a.complete("q", [CompleteItem(j.token, b"null") for j in jobs])
        await until(lambda: bool(_indexed(store)) and a._queues["q"].archiver.failures > 0)
        await crash(a)
        store.heal()
        b = await successor(store, clock)
        try:
            await archived_and_dropped(b, store, clock, deleted=False)
            _once(store, ids[:2])
            assert len(store.list(paths.archive_prefix("q"))) == 1 and len(_indexed(store)) == 1
            for job_id in ids[:2]:
                assert (await b.job("q", job_id))["location"] == "archive"
            assert (await b.job("q", ids[2]))["status"] == "pending"
        finally:
            await b.stop(5)

    run(main())


def test_a_crash_between_the_commit_and_any_archive_write(tmp_path: Path) -> None:
    """Nothing of the archive landed (index, start marker, object): the successor
    writes it all from the queue object, which still holds the completions."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))
    store.inject("put", NOT_LANDED, times=None, key_contains="q/archive")

    async def main() -> None:
        a = await started(store, clock=clock)
        ids = await a.push("q", [b'{"n":1}', b'{"n":2}'])
        jobs = await a.claim("q", "w", 2)
        await a.complete("q", [CompleteItem(j.token, b"1") for j in jobs])
        await until(lambda: a._queues["q"].archiver.failures > 0)
        assert store.list("q/archive") == [] and len(stored(store).completed) == 1
        await crash(a)
        store.heal()
        b = await successor(store, clock)
        try:
            await archived_and_dropped(b, store, clock, deleted=False)
            _once(store, ids)
            (start,) = store.list(paths.archive_start_prefix("q"))
            assert start.endswith("-clean")  # (nothing was archived before)
            for job_id in ids:
                got = await b.job("q", job_id)
                assert (got["location"], got["result"].__class__.__name__) == (
                    "archive", "Fragment")
        finally:
            await b.stop(5)

    run(main())


def test_an_archive_from_before_the_index_is_marked_legacy_and_still_searched(
        tmp_path: Path) -> None:
    """A queue whose first jobs were archived by a broker that wrote no index
    (and named its objects without a range): this version's first archive write
    marks the index's start ``-legacy``, so those jobs are still found."""
    store = FileStore(tmp_path)
    clock = Clock()  # (the drop of archived jobs waits a second on it: the test moves it)

    async def main() -> None:
        a = await started(store, clock=clock)
        first = await a.push("q", [b'{"n":1}', b'{"n":2}'])
        jobs = await a.claim("q", "w", 1)
        await a.complete("q", [CompleteItem(jobs[0].token, b'"old"')])
        await archived_and_dropped(a, store, clock, deleted=False)
        await a.stop(5)
        # what an older broker would have left: no index, no range in the name
        for key in store.list(paths.archive_index_prefix("q")):
            store.delete(key)
        (key,) = store.list(paths.archive_prefix("q"))
        old = key.rsplit("-j", 2)[0] + ".jsonl"
        store.put(old, store.get(key))
        store.delete(key)

        b = await started(store, "http://b", clock)
        try:
            (second,) = await b.claim("q", "w", 1)
            await b.complete("q", [CompleteItem(second.token, b'"new"')])
            await archived_and_dropped(b, store, clock, deleted=False)
            (start,) = store.list(paths.archive_start_prefix("q"))
            assert start.endswith("-legacy")
            got = await b.job("q", first[0])
            assert (got["location"], got["archive_key"]) == ("archive", old)
            got = await b.job("q", first[1])
            assert got["location"] == "archive" and got["archive_key"] != old
        finally:
            await b.stop(5)

    run(main())
