"""The archive's search of objects named without a job range
(broker.model.format.archive.find_job, when the index does not hold a job):
every such object an older broker wrote is searched, whatever hour it is
in, not only those up to the hour of the start marker, which is the hour of
the first commit this version archived, not of the last one an older broker
archived."""

from __future__ import annotations

from pathlib import Path

import orjson

from broker import paths
from broker.model.ops import CompleteItem
from broker.storage import FileStore
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import crash, run, started, stored, successor, until

T0 = 1_767_229_140_000  # 2026-01-01T00:59:00Z: a minute before an hour ends


def _unranged(store: FileStore, key: str) -> str:
    """Rename archive object ``key`` as a broker from before the index named it."""
    old = key.rsplit("-j", 2)[0] + ".jsonl"
    store.put(old, store.get(key))
    store.delete(key)
    return old


def test_an_object_an_older_broker_archived_after_its_first_pending_commit_is_found(
        tmp_path: Path) -> None:
    """An older broker completed job 1 at 00:59 (its archive write failing, so
    that commit stays in the queue object) and job 2 at 01:00 (archived, in
    hour 01, unindexed, and dropped). This version takes over: its first
    archive write is job 1's commit, of hour 00, so its ``-legacy`` marker
    names hour 00. Job 2, archived in hour 01 without a range, must still be
    found; on main the search stopped at hour 00 and answered 404."""
    clock = Clock(T0)
    files = FileStore(tmp_path)
    store = FaultyStore(files)
    hour0, hour1 = paths.archive_hour(T0), paths.archive_hour(T0 + 60_000)
    assert hour0 != hour1
    store.inject("put", NOT_LANDED, times=None,
                 key_contains=f"{paths.archive_prefix('q')}{hour0}/")

    async def main() -> None:
        a = await started(store, clock=clock)
        ids = await a.push("q", [b'{"n":1}', b'{"n":2}'])
        jobs = {j.id: j for j in await a.claim("q", "w", 2, lease_s=600)}
        await a.complete("q", [CompleteItem(jobs[ids[0]].token, b'"first"')])
        await until(lambda: a._queues["q"].archiver.failures > 0)
        clock.advance(60)
        await a.complete("q", [CompleteItem(jobs[ids[1]].token, b'"second"')])

        def second_dropped() -> bool:
            clock.advance(1)  # (the drop waits DROP_DELAY_S on the broker's clock)
            a._queues["q"].loop.poke()
            return len(stored(store).completed) == 1

        await until(second_dropped)
        await crash(a)
        # what a broker from before the index would have left: no index, no marker,
        # job 2's object named without its range (in hour 01)
        for key in files.list(paths.archive_index_prefix("q")):
            files.delete(key)
        (key,) = files.list(paths.archive_prefix("q"))
        assert f"/{hour1}/" in key
        old = _unranged(files, key)
        store.heal()

        b = await successor(store, clock)
        try:
            await until(lambda: not stored(store).completed)
            (start,) = files.list(paths.archive_start_prefix("q"))
            assert start.endswith("-legacy")
            got = await b.job("q", ids[0])
            assert (got["location"], got["status"]) == ("archive", "completed")
            got = await b.job("q", ids[1])
            assert (got["location"], got["archive_key"]) == ("archive", old)
            assert orjson.dumps(got["result"]) == b'"second"'
        finally:
            await b.stop(5)

    run(main())
