"""A broker serving segments (broker.service.by_reference, queue_target.prepare):
a bulk push large enough goes into segment objects the head references, claims
take them in order, a purge drops them, and a segment leaves the store only
after the commit that dropped it has landed. Real file store, store checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker import paths
from broker.model.ops import CompleteItem
from broker.service import by_reference
from broker.storage import store_from_url
from tests.support.faults import Clock
from tests.support.inprocess import (
    archived_and_dropped,
    bodies,
    payloads,
    run,
    segment_objects,
    stage_all,
    staged_chunks,
    started,
    stored,
)


async def _settled(broker: object) -> None:
    """Wait for the segment deletes the last commits started."""
    for q in broker._queues.values():  # type: ignore[attr-defined]
        await asyncio.gather(*q.target._deleting)


def test_by_reference_helpers_split_by_jobs_and_bytes() -> None:
    sizes = [b"x" * 10] * 7
    assert by_reference.chunks(sizes, max_jobs=3, max_bytes=1000) == [(0, 3), (3, 6), (6, 7)]
    assert by_reference.chunks(sizes, max_jobs=100, max_bytes=25) == [
        (0, 2), (2, 4), (4, 6), (6, 7)]
    assert by_reference.chunks([b"x" * 50], max_jobs=3, max_bytes=25) == [(0, 1)]


HELD = pytest.mark.parametrize("held", [True, False], ids=["held", "moved_in"])


@HELD
def test_a_bulk_push_goes_into_segments_and_drains_in_order(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             held: bool) -> None:
    """... and each segment's ref and object go once its jobs are done: moved in,
    with the claim that took its last job; held in claim records, once their
    completions are archived and dropped (no record names it any more)."""
    monkeypatch.setattr(by_reference, "SEGMENT_MAX_BYTES", 400)  # many small segments
    store = store_from_url(f"file://{tmp_path}")

    clock = Clock()  # (the drop of archived jobs waits a second on it: the test moves it)

    async def go() -> None:
        broker = await started(store, clock=clock, segment_push_jobs=50, held_in_records=held)
        await broker.push("q", bodies(3))  # inline: below the threshold
        ids = await broker.push("q", bodies(200, 3))
        assert ids[0] == "j0000000004" and len(ids) == 200
        head = stored(store)
        assert len(head.jobs) == 3 and len(head.segment_refs) > 3
        assert sum(r.count for r in head.segment_refs) == 200
        assert segment_objects(store) == sorted(r.key for r in head.segment_refs)
        assert (await broker.stats("q"))["counts"]["pending"] == 203
        assert sorted(payloads(store), key=lambda p: p["n"]) == [{"n": i} for i in range(203)]
        got = []
        while True:
            jobs = await broker.claim("q", "w", max_jobs=7)
            if not jobs:
                break
            got += [job.id for job in jobs]
            await broker.complete("q", [CompleteItem(job.token) for job in jobs])
        assert got == sorted(got) and len(got) == len(set(got)) == 203
        assert sorted(payloads(store), key=lambda p: p["n"]) == [{"n": i} for i in range(203)]
        await archived_and_dropped(broker, store, clock)
        await _settled(broker)
        head = stored(store)
        assert head.segment_refs == [] and segment_objects(store) == []
        await broker.stop()

    run(go())


@HELD
def test_a_purge_drops_the_segments_and_then_their_objects(tmp_path: Path, held: bool) -> None:
    """A purge of pending jobs drops the segments' refs, then their objects; one a
    claim record still names (jobs held there) stays, exhausted, until those
    jobs are done and archived."""
    store = store_from_url(f"file://{tmp_path}")

    clock = Clock()  # (the drop of archived jobs waits a second on it: the test moves it)

    async def go() -> None:
        broker = await started(store, clock=clock, segment_push_jobs=10, held_in_records=held)
        await broker.push("q", bodies(100))
        claimed = await broker.claim("q", "w", max_jobs=5)
        assert len(segment_objects(store)) == 1
        assert await broker.purge("q", ["pending"]) == 95
        await _settled(broker)
        if held:  # (the claim's five are held at the segment: it stays)
            refs = stored(store).segment_refs
            assert [(r.taken, r.count) for r in refs] == [(100, 100)]
            assert segment_objects(store) == [refs[0].key]
            assert sorted(p["n"] for p in payloads(store)) == [0, 1, 2, 3, 4]
            await broker.complete("q", [CompleteItem(j.token) for j in claimed])
            await archived_and_dropped(broker, store, clock)
            await _settled(broker)
        assert stored(store).segment_refs == [] and segment_objects(store) == []
        assert (await broker.stats("q"))["counts"]["pending"] == 0
        await broker.stop()

    run(go())


def test_a_deleted_segment_is_refused_by_name_and_nothing_changes(tmp_path: Path) -> None:
    store = store_from_url(f"file://{tmp_path}")

    async def go() -> None:
        broker = await started(store, segment_push_jobs=10)
        await broker.push("q", bodies(20))
        key = segment_objects(store)[0]
        store.delete(key)
        before = store.read(paths.state_key("q")).data
        with pytest.raises(Exception) as err:
            await broker.claim("q", "w", max_jobs=5)
        assert getattr(err.value, "code", None) == "segment_missing"
        assert key in str(err.value)
        assert store.read(paths.state_key("q")).data == before
        await broker.stop()

    run(go())


def test_pages_of_jobs_show_segment_jobs_in_seq_order(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(by_reference, "SEGMENT_MAX_BYTES", 300)
    store = store_from_url(f"file://{tmp_path}")

    async def go() -> None:
        broker = await started(store, segment_push_jobs=20)
        await broker.push("q", bodies(3))
        await broker.push("q", bodies(60, 3))
        await broker.push("q", [b'{"n":63}'])
        await broker.claim("q", "w", max_jobs=4)
        for status, want in ((None, 64), ("pending", 60), ("claimed", 4)):
            seen, after = [], None
            while page := await broker.jobs("q", status=status, limit=7, after=after):
                seen += [job["id"] for job in page]
                after = page[-1]["id"]
            assert seen == sorted(set(seen)) and len(seen) == want, status
        await broker.stop()

    run(go())


def test_a_publish_of_many_chunks_streams_them_into_segments(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(by_reference, "MAX_SEGMENT_JOBS", 250)  # a segment every 2.5 chunks
    store = store_from_url(f"file://{tmp_path}")
    chunks = staged_chunks(9)
    chunks.append(b'{"priority":5}\t{"n":900}\n')  # a job with options: inline

    async def go() -> None:
        broker = await started(store, segment_push_jobs=500)
        keep = await stage_all(broker, "q", chunks)
        done = await broker.publish("q", "w-1/", keep, once="write:w-1")
        assert done == {"published": 901, "discarded": 0, "duplicate": False}
        head = stored(store)
        assert sum(r.count for r in head.segment_refs) == 900 and len(head.jobs) == 1
        assert [job.priority for job in head.jobs.values()] == [5]
        assert sorted(p["n"] for p in payloads(store)) == list(range(901))
        assert store.list("q/staging/") == []
        small = await broker.publish("q", "w-2/", [], once="write:w-2")
        assert small["published"] == 0
        await broker.stop()

    run(go())
