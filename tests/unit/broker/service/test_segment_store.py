"""Segment objects in the store (broker/service/segment_store.py): written once,
read a window at a time, refused when missing or changed, deleted once
dropped, swept when no landed head references them and this broker has
listed them for the grace period. Each test checks the store afterwards."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from broker import paths
from broker.commit.offloop import run_bulk, run_io
from broker.errors import SegmentMissing, StorageUnavailable
from broker.model.format import codec
from broker.model.format.segment_format import encode_segment, segment_job
from broker.model.state import SegmentRef
from broker.service.segment_store import SegmentStore
from broker.storage import FileStore, MemoryStore, ObjectStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import run, started
from tests.support.states import committed, new_queue

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
GRACE_S = 600.0
PAYLOADS = [b'{"n":1}', b'{"n":2}', b'{"n":3}']


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    ex = ThreadPoolExecutor(2)
    yield ex
    ex.shutdown()


def segments_of(store: ObjectStore, executor: ThreadPoolExecutor, clock: Clock) -> SegmentStore:
    return SegmentStore(store, functools.partial(run_io, executor),
                        functools.partial(run_bulk, executor),
                        grace_s=GRACE_S, monotonic=clock.monotonic)


def snapshot(store: ObjectStore) -> dict[str, bytes]:
    """Every object of queue ``q``, by key."""
    return {key: store.get(key) for key in store.list("q/")}


def seg_keys(store: ObjectStore) -> list[str]:
    return store.list(paths.segments_prefix("q"))


def write_head(store: ObjectStore, refs: list[SegmentRef]) -> None:
    """A landed queue object (format 4) of ``q`` holding ``refs`` and no jobs."""
    state = committed(new_queue(NOW), NOW)
    state.segment_refs = list(refs)
    state.counters.enqueued = max((r.first_seq + r.count - 1 for r in refs), default=0)
    store.create_if_absent(paths.state_key("q"), codec.encode(state))


async def write(segs: SegmentStore, first_seq: int = 1) -> SegmentRef:
    return await segs.write("q", first_seq, 2, NOW, PAYLOADS, max_attempts=3,
                            created_ms=NOW - 5)


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return MemoryStore() if request.param == "memory" else FileStore(tmp_path)


def test_write_then_read_window_round_trip(store: ObjectStore,
                                           executor: ThreadPoolExecutor) -> None:
    segs = segments_of(store, executor, Clock())

    async def main() -> tuple[SegmentRef, list[bytes], list[bytes]]:
        ref = await write(segs, first_seq=7)
        return ref, await segs.read_window(ref), await segs.read_window(ref, 1, 2)

    ref, lines, middle = run(main())
    assert (ref.first_seq, ref.count, ref.priority, ref.run_at_ms, ref.taken) == (7, 3, 2, NOW, 0)
    assert paths.parse_segment_key(ref.key) == ("q", 7)
    assert ref.etag == store.head(ref.key)
    assert snapshot(store) == {ref.key: encode_segment(
        "q", 7, 2, NOW, PAYLOADS, max_attempts=3, created_ms=NOW - 5)}
    jobs = [segment_job(seq, line, ref) for seq, line in enumerate(lines, 7)]
    assert [j.payload for j in jobs] == PAYLOADS
    assert [(j.seq, j.priority, j.run_at_ms, j.created_ms, j.max_attempts) for j in jobs] == [
        (seq, 2, NOW, NOW - 5, 3) for seq in (7, 8, 9)]
    assert middle == [lines[1]]


def test_each_write_makes_a_new_object(executor: ThreadPoolExecutor) -> None:
    """A segment is never replaced: writing the same jobs again (a retry) makes
    another object under a fresh salt."""
    store = MemoryStore()
    segs = segments_of(store, executor, Clock())
    first, second = run(write(segs)), run(write(segs))
    assert first.key != second.key
    assert seg_keys(store) == sorted([first.key, second.key])


def test_a_segment_write_whose_retry_got_412_is_the_written_object(
        executor: ThreadPoolExecutor) -> None:
    """The store client's own retry of a create that landed sees 412: the object
    holds the bytes written, so the write succeeds with its etag."""
    inner = MemoryStore()
    store = FaultyStore(inner)
    segs = segments_of(store, executor, Clock())
    store.inject("create_if_absent", LOST_REPLY_412, key_contains="/segments/")
    ref = run(write(segs))
    assert seg_keys(inner) == [ref.key]
    assert ref.etag == inner.head(ref.key)
    assert run(segs.read_window(ref))


def test_a_segment_write_whose_reply_is_lost_is_swept_after_the_grace_not_before(
        executor: ThreadPoolExecutor) -> None:
    inner = MemoryStore()
    store = FaultyStore(inner)
    clock = Clock()
    segs = segments_of(store, executor, clock)
    write_head(inner, [])
    store.inject("create_if_absent", LOST_REPLY, key_contains="/segments/")
    with pytest.raises(StorageUnavailable):
        run(write(segs))
    [orphan] = seg_keys(inner)  # landed, but the caller never learned its key or etag
    head = inner.get(paths.state_key("q"))

    def sweep() -> int:
        return run(segs.sweep("q", set(), landed=functools.partial(segs.landed_refs, "q")))

    assert sweep() == 0  # first listed now
    clock.advance(GRACE_S - 1)
    assert sweep() == 0
    assert seg_keys(inner) == [orphan]
    clock.advance(1)
    assert sweep() == 1
    assert snapshot(inner) == {paths.state_key("q"): head}


def test_a_sweep_without_the_landed_head_deletes_nothing(executor: ThreadPoolExecutor) -> None:
    store = MemoryStore()
    clock = Clock()
    segs = segments_of(store, executor, clock)
    ref = run(write(segs))
    assert run(segs.sweep("q", set())) == 0
    clock.advance(GRACE_S * 10)
    assert run(segs.sweep("q", set())) == 0

    async def unknown() -> None:
        return None

    assert run(segs.sweep("q", set(), landed=unknown)) == 0
    assert seg_keys(store) == [ref.key]


def test_a_referenced_segment_is_never_swept(executor: ThreadPoolExecutor) -> None:
    """Referenced by the landed head, the segment stays however old, even when
    the caller's in-memory head (stale, or mid-commit) does not name it; an
    unreferenced one beside it goes."""
    store = MemoryStore()
    clock = Clock()
    segs = segments_of(store, executor, clock)
    ref = run(write(segs, first_seq=1))
    stray = run(write(segs, first_seq=4))
    write_head(store, [ref])
    landed = functools.partial(segs.landed_refs, "q")
    assert run(segs.sweep("q", {ref.key}, landed=landed)) == 0
    clock.advance(GRACE_S * 1000)
    assert run(segs.sweep("q", {ref.key}, landed=landed)) == 1  # the stray one
    assert seg_keys(store) == [ref.key]
    assert run(segs.sweep("q", set(), landed=landed)) == 0  # in memory: not named
    assert seg_keys(store) == [ref.key]
    assert stray.key not in snapshot(store)
    assert run(segs.read_window(ref)) != []


def test_a_segment_the_in_memory_head_references_is_kept(
        executor: ThreadPoolExecutor) -> None:
    """Named by the caller's in-memory head (a commit referencing it may be in
    flight), a segment stays even though the landed head does not name it yet."""
    store = MemoryStore()
    clock = Clock()
    segs = segments_of(store, executor, clock)
    ref = run(write(segs))
    write_head(store, [])
    landed = functools.partial(segs.landed_refs, "q")
    run(segs.sweep("q", {ref.key}, landed=landed))
    clock.advance(GRACE_S)
    assert run(segs.sweep("q", {ref.key}, landed=landed)) == 0
    assert seg_keys(store) == [ref.key]


@pytest.mark.parametrize("how", ["missing", "rewritten"])
def test_read_window_of_a_missing_or_changed_object_is_refused_naming_it(
        store: ObjectStore, executor: ThreadPoolExecutor, how: str) -> None:
    segs = segments_of(store, executor, Clock())
    ref = run(write(segs))
    if how == "missing":
        store.delete(ref.key)
    else:  # behind the broker's back: other bytes, another etag
        store.put(ref.key, encode_segment("q", 1, 2, NOW, [b'{"n":9}'] * 3, max_attempts=3))
    before = snapshot(store)
    with pytest.raises(SegmentMissing, match=ref.key) as info:
        run(segs.read_window(ref))
    assert info.value.code == "segment_missing"
    assert ("missing" if how == "missing" else "etag") in str(info.value)
    assert snapshot(store) == before


def test_read_window_outside_the_segment_is_refused_before_any_read(
        executor: ThreadPoolExecutor) -> None:
    store = FaultyStore(MemoryStore())
    segs = segments_of(store, executor, Clock())
    ref = run(write(segs))
    reads = store.calls.get("read", 0)
    with pytest.raises(ValueError, match=r"window \[2, 4\)"):
        run(segs.read_window(ref, 2, 4))
    assert store.calls.get("read", 0) == reads


def test_delete_dropped_deletes_exactly_the_given_refs_objects(
        store: ObjectStore, executor: ThreadPoolExecutor) -> None:
    segs = segments_of(store, executor, Clock())
    refs = [run(write(segs, first_seq=seq)) for seq in (1, 4, 7)]
    write_head(store, [refs[1]])
    before = snapshot(store)
    assert run(segs.delete_dropped([refs[0], refs[2]])) == 2
    assert snapshot(store) == {k: v for k, v in before.items()
                               if k not in (refs[0].key, refs[2].key)}
    assert run(segs.delete_dropped([])) == 0


def test_a_failed_delete_of_a_dropped_segment_is_left_to_the_sweep(
        executor: ThreadPoolExecutor) -> None:
    inner = MemoryStore()
    store = FaultyStore(inner)
    clock = Clock()
    segs = segments_of(store, executor, clock)
    dropped, other = run(write(segs, first_seq=1)), run(write(segs, first_seq=4))
    write_head(inner, [])  # the commit that dropped both has landed
    store.inject("delete", NOT_LANDED, key_contains=dropped.key)
    assert run(segs.delete_dropped([dropped, other])) == 1  # no error raised
    assert seg_keys(inner) == [dropped.key]
    landed = functools.partial(segs.landed_refs, "q")
    assert run(segs.sweep("q", set(), landed=landed)) == 0
    clock.advance(GRACE_S)
    assert run(segs.sweep("q", set(), landed=landed)) == 1
    assert seg_keys(inner) == []


def test_the_brokers_periodic_sweep_removes_an_unreferenced_segment_after_the_grace(
        tmp_path: Path) -> None:
    """Wired: Broker.sweep_staging (the periodic staging sweep) sweeps the
    segment objects of the queues the broker serves."""
    store = FileStore(tmp_path)
    clock = Clock(NOW)

    async def main() -> tuple[list[str], list[str], list[str]]:
        a = await started(store, clock=clock)
        await a.push("q", [b'{"n":0}'])
        stray = await a.segments.write("q", 2, 0, NOW, PAYLOADS, max_attempts=3)
        await a.sweep_staging()
        clock.advance(GRACE_S - 1)
        await a.sweep_staging()
        kept = seg_keys(store)
        clock.advance(1)
        await a.sweep_staging()
        after = seg_keys(store)
        await a.stop(drain_s=5)
        return [stray.key], kept, after

    stray, kept, after = run(main())
    assert kept == stray
    assert after == []
    assert store.list("q/") == [paths.state_key("q")]
