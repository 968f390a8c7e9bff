"""broker.service.queue_target's held-jobs cache under pressure (brokers with
``held_in_records`` and a cache smaller than the claims it holds): every job a
batch settles keeps its line through the batch, whichever records prepare had to
load and whichever it found loaded; the store checked afterwards (each job once).
In-process brokers on a file store."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from broker import paths
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.model.segments import claims
from broker.storage import FileStore
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import (
    archive_lines,
    crash,
    run,
    segment_objects,
    segment_payloads,
    started,
    stored,
    successor,
    until,
)

#: a cache of 1 MiB, claims of ~600 KiB each: the second claim's lines push the first's out
CONFIG = {"held_in_records": True, "segment_push_jobs": 10, "held_cache_mb": 1}
PAD = "x" * 1000
ARCHIVE = paths.archive_prefix("q")
#: the cache large enough for every claim
SMALL = {"held_in_records": True, "segment_push_jobs": 10}


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


def test_a_cancel_that_takes_a_segments_last_jobs_keeps_it_while_a_record_names_it(
        tmp_path: Path) -> None:
    """Half a segment claimed (held in the record), then a cancel of its last job
    moves the rest into the head, exhausting the ref: the ref and its object stay
    while the record names the segment, so a successor with an empty cache fails
    the held jobs back to pending; once every job is settled the object goes."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **SMALL)
        ids = await a.push("q", [b'{"n":%d}' % i for i in range(10)])
        jobs = await a.claim("q", "w", 5, lease_s=600)
        [answer] = await a.cancel("q", [ids[-1]])
        assert answer.status == "cancelled"
        head = stored(store)
        [ref] = head.segment_refs  # (exhausted, named by the claim's record)
        assert ref.exhausted and set(head.seg_names) == {ref.key}
        await a.stop(5)
        assert segment_objects(store) == [ref.key]  # (its held jobs' lines are there)
        b = await successor(store, clock)
        try:
            got = await b.fail("q", [FailItem(j.token, "boom", 0) for j in jobs])
            assert [(x.ok, x.status) for x in got] == [(True, "pending")] * 5, got
            head = stored(store)
            assert sorted(j.id for j in head.jobs.values()) == ids[:-1]
            assert {j.status for j in head.jobs.values()} == {"pending"}
            await until(lambda: [r["id"] for r in archive_lines(store)] == ids[-1:])
            assert archive_lines(store)[0]["status"] == "cancelled"
            assert not head.claim_records and not head.segment_refs
            await until(lambda: segment_objects(store) == [])
        finally:
            await b.stop(5)

    run(main())


def test_a_broker_without_held_in_records_claims_the_rest_of_a_half_held_segment(
        tmp_path: Path) -> None:
    """A head with a record holding half a segment, served by a broker with the
    flag off (a rollback): its claims move the rest into the head, exhausting the
    ref, which stays while the record names it; the held jobs fail back to
    pending through it, each job once, and the object goes once none is held."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **SMALL)
        ids = await a.push("q", [b'{"n":%d}' % i for i in range(10)])
        held = await a.claim("q", "w", 5, lease_s=600)
        await a.stop(5)
        b = await started(store, url="http://b", clock=clock, segment_push_jobs=10,
                          held_in_records=False)
        try:
            rest = await b.claim("q", "w", 10, lease_s=600)
            assert sorted(j.id for j in rest) == ids[5:]
            head = stored(store)
            assert [r.key for r in head.segment_refs] == list(head.seg_names)
            assert segment_objects(store) == list(head.seg_names)
            got = await b.fail("q", [FailItem(j.token, "boom", 0) for j in held])
            assert [(x.ok, x.status) for x in got] == [(True, "pending")] * 5, got
            head = stored(store)
            assert sorted(j.id for j in head.jobs.values()) == ids
            assert head.count_by_status()["pending"] == 5
            assert head.count_by_status()["claimed"] == 5
            assert not head.segment_refs and not head.seg_names
            await until(lambda: segment_objects(store) == [])
        finally:
            await b.stop(5)

    run(main())


def test_a_successor_reclaims_the_held_jobs_of_a_dead_owners_expired_claim(
        tmp_path: Path) -> None:
    """The owner claims 200 jobs (held in one record) and dies; the successor,
    its cache empty, takes the queue over while the leases still run (so it
    loads nothing for them), and once they run out its own housekeeping, with
    no client naming a token, reclaims them: prepare loads the lines an
    expiring record's reclaim needs. Every job back to pending once, claimable
    again; the segment gone once none is held."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **SMALL)
        ids = await a.push("q", [b'{"n":%d}' % i for i in range(200)])
        assert len(await a.claim("q", "w", 200, lease_s=600)) == 200
        await crash(a)
        b = await successor(store, clock)
        try:
            clock.advance(601)  # (past every lease, the takeover's fresh ones too)
            assert await b.push("q", [b'{"n":200}']) == ["j0000000201"]  # (a batch)
            head = stored(store)
            assert head.count_by_status()["pending"] == 201, head.count_by_status()
            assert sorted(j.id for j in head.jobs.values()) == [*ids, "j0000000201"]
            assert all(j.attempts == 1 and "lease expired" in (j.last_error or "")
                       for j in head.jobs.values() if j.id != "j0000000201")
            assert not head.claim_records and not head.segment_refs
            again = await b.claim("q", "w2", 300, lease_s=600)
            assert sorted(j.id for j in again) == [*ids, "j0000000201"]
            await until(lambda: segment_objects(store) == [])
        finally:
            await b.stop(5)

    run(main())


def test_half_a_record_completed_and_the_other_half_reclaimed_each_job_once(
        tmp_path: Path) -> None:
    """Half a held claim completed while its archive object cannot land, the
    owner dies, the successor's leases run out: the other half is reclaimed
    (pending lines), the stale tokens of it are refused, the done half archived
    once (by the successor, from the segment) and the segment deleted once the
    record is gone."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **SMALL)
        ids = await a.push("q", [b'{"n":%d}' % i for i in range(40)])
        jobs = await a.claim("q", "w", 40, lease_s=600)
        store.inject("put", NOT_LANDED, times=None, key_contains=ARCHIVE)
        got = await a.complete("q", [CompleteItem(j.token, b'{"r":1}') for j in jobs[:20]])
        assert [(x.ok, x.status) for x in got] == [(True, "completed")] * 20
        await crash(a)
        store.heal()
        b = await successor(store, clock)
        try:
            clock.advance(601)
            await b.push("q", [b'{"n":40}'])
            stale = await b.complete("q", [CompleteItem(j.token, None) for j in jobs[20:]])
            assert not any(x.ok for x in stale)
            again = await b.complete("q", [CompleteItem(j.token, None) for j in jobs[:20]])
            assert all(x.ok and x.status == "completed" for x in again)  # (repeats)
            await until(lambda: not stored(store).claim_records)
            head = stored(store)
            assert sorted(j.id for j in head.jobs.values()) == [*ids[20:], "j0000000041"]
            assert {j.status for j in head.jobs.values()} == {"pending"}
            assert Counter(r["id"] for r in archive_lines(store)) == Counter(ids[:20])
            assert not head.segment_refs
            await until(lambda: segment_objects(store) == [])
        finally:
            await b.stop(5)

    run(main())


def test_a_queue_that_takes_up_groups_claims_the_rest_of_a_half_held_segment(
        tmp_path: Path) -> None:
    """A third of an ungrouped segment held in a record, then the queue gets a
    group setting and grouped jobs: its claims move the ungrouped rest into the
    head (exhausting the ref, kept while named) beside the grouped segment's;
    every job, held, moved in or grouped, is settled once (a successor claims and
    completes what is left) and both segments are deleted once drained."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **SMALL)
        ids = await a.push("q", [b'{"n":%d}' % i for i in range(30)])
        held = await a.claim("q", "w", 10, lease_s=600)
        await a.create_queue("q", {"group_limit": 2})
        gids = await a.push("q", [NewJob(b'{"g":%d}' % i, group=f"g{i % 3}")
                                  for i in range(30)])
        moved = await a.claim("q", "w", 100, lease_s=600)
        assert Counter(j.id in ids for j in moved) == {True: 20, False: 6}
        head = stored(store)  # (decodes: the held segment's ref stays, exhausted)
        assert set(head.seg_names) <= {r.key for r in head.segment_refs}
        got = await a.fail("q", [FailItem(j.token, "boom", 0) for j in held])
        assert [(x.ok, x.status) for x in got] == [(True, "pending")] * 10
        await a.complete("q", [CompleteItem(j.token, None) for j in moved])
        await crash(a)
        b = await successor(store, clock)
        try:
            while got := await b.claim("q", "w", 100, lease_s=600):
                await b.complete("q", [CompleteItem(j.token, None) for j in got])
            await until(lambda: not stored(store).claim_records
                        and stored(store).count_by_status()["completed"] == 0)
            head = stored(store)
            assert sum(head.count_by_status().values()) == 0
            assert Counter(r["id"] for r in archive_lines(store)) == Counter(ids + gids)
            await until(lambda: segment_objects(store) == [])
        finally:
            await b.stop(5)

    run(main())


def test_a_mass_expiry_is_reclaimed_over_batches_of_bounded_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three held claims of 200 run out at once on a successor with an empty
    cache, while a batch may load the lines of at most 250 held jobs for a
    reclaim: the first batch reclaims one claim, the next ones (the leases
    still due) the others; every job pending once, no record left."""
    monkeypatch.setattr(claims, "RECLAIM_HELD_JOBS", 250)
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **SMALL)
        ids = await a.push("q", [b'{"n":%d}' % i for i in range(600)])
        for _ in range(3):
            assert len(await a.claim("q", "w", 200, lease_s=600)) == 200
        await crash(a)
        b = await successor(store, clock)
        try:
            held: list[int] = []  # claim records in each head written from now on
            store.inject("write_if_match", None, times=None, key_contains="q/queue.json",
                         after=lambda _: held.append(len(stored(store).claim_records)))
            clock.advance(601)
            await b.push("q", [b'{"n":600}'])  # (a batch: its reclaim loads one claim)
            await until(lambda: held[-1:] == [0])  # (the hook runs on the store's thread)
            assert [n for i, n in enumerate(held) if i == 0 or n != held[i - 1]] == [2, 1, 0]
            head = stored(store)
            assert head.count_by_status()["pending"] == 601
            assert sorted(j.id for j in head.jobs.values())[:600] == ids
            assert all(j.attempts == 1 for j in head.jobs.values() if j.id in set(ids))
        finally:
            await b.stop(5)

    run(main())
