"""Failure paths of segment objects: each test injects a storage fault or a
crash around a push, publish or claim by reference and then checks the store
itself: every acknowledged job is in a landed head or a segment it references
exactly once, and no segment object is left behind once swept or drained."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker import paths
from broker.errors import OsqueueError
from broker.model.ops import CompleteItem
from broker.storage.files import FileStore
from tests.support.faults import LOST_REPLY, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import (
    archived_and_dropped,
    bodies,
    crash,
    payloads,
    run,
    segment_objects,
    stage_all,
    staged_chunks,
    started,
    stored,
    successor,
)

QUEUE_KEY = paths.state_key("q")



def _ns(store: FaultyStore) -> list[int]:
    return sorted(p["n"] for p in payloads(store))


async def _sweep_twice(broker: object, clock: Clock) -> None:
    """Two sweeps a grace period apart: the first lists, the second deletes."""
    await broker.sweep_staging()  # type: ignore[attr-defined]
    clock.advance(601)
    await broker.sweep_staging()  # type: ignore[attr-defined]


def test_a_segment_write_whose_reply_is_lost_is_pushed_once(tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10)
        await a.push("q", bodies(1))
        store.inject("create_if_absent", LOST_REPLY, key_contains="/segments/")
        with pytest.raises(OsqueueError):
            await a.push("q", bodies(50, 1), request="r-1")
        assert _ns(store) == [0]  # nothing acknowledged, nothing referenced
        assert len(segment_objects(store)) == 1  # the object that landed, unreferenced
        await a.push("q", bodies(50, 1), request="r-1")  # the caller's retry
        assert _ns(store) == list(range(51))
        # (the first attempt's seqs stay reserved, unused: not counted as enqueued)
        assert stored(store).counters.reserved == 50
        assert (await a.stats("q"))["enqueued_total"] == 51
        await _sweep_twice(a, clock)
        assert segment_objects(store) == sorted(r.key for r in stored(store).segment_refs)
        assert _ns(store) == list(range(51))
        await a.stop()

    run(go())


@pytest.mark.parametrize("fault", [LOST_REPLY, NOT_LANDED])
def test_a_commit_lost_after_its_segment_was_written(tmp_path: Path, fault: str) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10)
        await a.push("q", bodies(1))
        # the reservation's commit is the 1st write of the state, the refs' the 2nd
        store.inject("write_if_match", fault, nth=2, key_contains=QUEUE_KEY)
        ids = await a.push("q", bodies(50, 1))
        assert len(ids) == 50 and [k for _, k, _ in store.injected] == [fault]
        assert _ns(store) == list(range(51))
        assert segment_objects(store) == sorted(r.key for r in stored(store).segment_refs)
        await a.stop()

    run(go())


@pytest.mark.parametrize("held", [True, False], ids=["held", "moved_in"])
def test_a_takeover_in_the_middle_of_a_segment(tmp_path: Path, held: bool) -> None:
    """Claims from a segment held in claim records (or moved into the head)
    across a takeover: every job is handed out once while leased, the crashed
    owner's unfinished ones come back after their lease, and the segment's ref
    and object go once every job is archived (no ref or record names it)."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10, held_in_records=held)
        await a.push("q", bodies(100))
        first = await a.claim("q", "wa", max_jobs=30, lease_s=60)
        await a.complete("q", [CompleteItem(j.token) for j in first[:20]])
        ref = stored(store).segment_refs[0]
        assert ref.taken == 30
        await crash(a)
        b = await successor(store, clock, held_in_records=held)
        rest = []
        while jobs := await b.claim("q", "wb", max_jobs=16, lease_s=60):
            rest += jobs
            await b.complete("q", [CompleteItem(j.token) for j in jobs])
        ids_a = {j.id for j in first}
        assert len(rest) == 70 and not ids_a & {j.id for j in rest}
        # A's ten unfinished jobs come back once their lease (restarted by B) ends
        clock.advance(61)
        back = await b.claim("q", "wb", max_jobs=50, lease_s=60)
        assert {j.id for j in back} == {j.id for j in first[20:]}
        await b.complete("q", [CompleteItem(j.token) for j in back])
        assert _ns(store) == list(range(100))
        await archived_and_dropped(b, store, clock)
        assert stored(store).segment_refs == [] and segment_objects(store) == []
        assert _ns(store) == list(range(100))
        await b.stop()

    run(go())


def test_a_segment_deleted_under_a_landed_head_is_refused_at_load(tmp_path: Path) -> None:
    """The object goes while the commit that still references it (a claim that
    took part of it) is in flight: that commit lands, the serving broker goes
    on from the lines it holds, and the next broker to load the head refuses
    the queue by naming the object; nothing is written."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10)
        await a.push("q", bodies(40))
        key = segment_objects(store)[0]
        store.inject("write_if_match", None, key_contains=QUEUE_KEY,
                     before=lambda _k: store.inner.delete(key))
        assert len(await a.claim("q", "w", max_jobs=5, lease_s=60)) == 5
        assert stored(store).segment_refs[0].taken == 5  # landed, still referencing it
        await crash(a)
        before = store.read(QUEUE_KEY).data
        b = await successor(store, clock)
        with pytest.raises(OsqueueError) as err:
            await b.claim("q", "w", max_jobs=5)
        assert err.value.code == "segment_missing" and key in str(err.value)
        assert store.read(QUEUE_KEY).data == before
        await b.stop()

    run(go())


def test_a_publish_by_reference_retried_after_a_timeout(tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))
    chunks = staged_chunks(3)

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=100)
        await a.push("q", [b'{"n":-1}'])
        keep = await stage_all(a, "q", chunks)
        # the refs' commit lands, its reply is lost: the broker re-reads and answers
        store.inject("write_if_match", LOST_REPLY, nth=2, key_contains=QUEUE_KEY)
        first = await a.publish("q", "w-1/", keep, once="write:w-1")
        assert first["published"] == 300 and not first["duplicate"]
        objects = segment_objects(store)
        # the Spark driver timed out meanwhile and publishes again
        again = await a.publish("q", "w-1/", keep, once="write:w-1")
        assert again["duplicate"] and segment_objects(store) == objects
        assert _ns(store) == list(range(-1, 300))
        assert sum(r.count for r in stored(store).segment_refs) == 300
        await a.stop()

    run(go())
