"""Claims held in claim records (broker.service.queue_target with
``held_in_records``, the default) when the owner dies between a claim's landed
write and its reply: the successor answers the claim's repeat with the same
jobs (its held-jobs cache empty: read back from the segment), its completes
settle them, every job is archived exactly once, and the segment object is
deleted only after the landed commit that dropped its ref. Real file store;
the fault is the store's reply held back, then the broker crashed."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

from broker import paths
from broker.model.ops import CompleteItem, FailItem
from broker.storage.files import FileStore
from tests.support.faults import Clock, FaultyStore
from tests.support.inprocess import (
    archive_lines,
    archived_and_dropped,
    bodies,
    crash,
    run,
    segment_objects,
    started,
    stored,
    successor,
)

N = 2_000
QUEUE_KEY = paths.state_key("q")


def test_an_owner_killed_after_a_claim_of_2000_landed_unanswered(tmp_path: Path) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    landed, release = threading.Event(), threading.Event()

    def hold_the_reply(_key: str) -> None:  # (in the store's executor thread)
        landed.set()
        release.wait(30)

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=100)
        ids = await a.push("q", bodies(N))
        (ref,) = stored(inner).segment_refs
        store.inject("write_if_match", None, key_contains=QUEUE_KEY, after=hold_the_reply)
        claim = asyncio.ensure_future(a.claim("q", "w", N, lease_s=60, request="r-1"))
        while not landed.is_set():  # (the claim's write has landed; its reply is held)
            assert not claim.done(), claim
            await asyncio.sleep(0.01)
        await crash(a)
        claim.cancel()
        release.set()
        head = stored(inner)
        assert [r.key for r in head.segment_refs] == [ref.key] and head.seg_names
        assert len(head.claim_records) == 1 and not list(head.jobs.values())
        b = await successor(store, clock)
        try:
            got = await b.claim("q", "w", N, lease_s=60, request="r-1")  # the client's repeat
            assert sorted(j.id for j in got) == sorted(ids)
            assert segment_objects(inner) == [ref.key]
            done = await b.complete("q", [CompleteItem(j.token, b'"ok"') for j in got])
            assert all(x.ok for x in done)
            assert segment_objects(inner) == [ref.key]  # (named by the done entries)
            await archived_and_dropped(b, inner, clock)
            head = stored(inner)
            assert not head.segment_refs and not head.claim_records
            assert segment_objects(inner) == []
            assert Counter(r["id"] for r in archive_lines(inner)) == Counter(
                {job_id: 1 for job_id in ids})
            assert head.counters.completed == N
        finally:
            await b.stop(5)

    run(go())


def test_held_jobs_that_die_are_redriven_cancelled_and_archived_once(tmp_path: Path) -> None:
    """Held jobs failed past their last attempt become dead lines of the head
    (this phase's representation), a redrive makes them pending again, a
    cancel of a held job marks it (its complete answers cancelled), and at the
    end every job is archived (completed or cancelled) exactly once and the segment object
    is gone only once no ref or record names it."""
    clock = Clock()
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10)
        try:
            await a.create_queue("q", {"max_attempts": 1})
            ids = await a.push("q", bodies(40))
            (ref,) = stored(store).segment_refs
            got = await a.claim("q", "w", 40, lease_s=60)
            assert not list(stored(store).jobs.values())  # (held: no line)
            failed = await a.fail("q", [FailItem(j.token, "boom", 0) for j in got[:10]])
            assert all(x.ok for x in failed)
            dead = [j for j in stored(store).jobs.values() if j.status == "dead"]
            assert sorted(j.id for j in dead) == sorted(j.id for j in got[:10])
            marked = await a.cancel("q", [got[10].id])
            assert [m.status for m in marked] == ["cancel_requested"], marked
            assert await a.redrive("q") == 10
            ended = await a.complete("q", [CompleteItem(j.token) for j in got[10:]])
            assert not ended[0].ok and ended[0].status == "cancelled", ended[0]
            assert all(x.ok for x in ended[1:])
            again = await a.claim("q", "w", 40, lease_s=60)
            assert sorted(j.id for j in again) == sorted(j.id for j in got[:10])
            assert segment_objects(store) == [ref.key]
            await a.complete("q", [CompleteItem(j.token) for j in again])
            await archived_and_dropped(a, store, clock)
            head = stored(store)
            assert not head.segment_refs and not head.claim_records
            assert segment_objects(store) == []
            lines = archive_lines(store)
            assert Counter(r["id"] for r in lines) == Counter({job_id: 1 for job_id in ids})
            assert [r["id"] for r in lines if r["status"] == "cancelled"] == [got[10].id]
        finally:
            await a.stop(5)

    run(go())
