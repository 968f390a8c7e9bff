"""broker.service.by_reference._Writer.write when one of a push's segment
writes fails while a sibling's is still under way.

A push by reference writes its slices (at most MAX_SEGMENT_JOBS jobs each) as
segment objects at once, holds each written key from the sweep
(SegmentStore.hold) and releases them all once the push is answered. A slice
that fails (a payload with a line break: the push goes into the head instead;
a storage error: the push fails) used to end the write at once while its
siblings ran on; a sibling landing after the push was answered held its key
for ever: an object no head references and no sweep deletes, until the broker
restarts. Each test holds a sibling's write in the store until the push or
publish has failed or fallen back, lets it land, then sweeps twice a grace
period apart: every object the failed attempt wrote is gone, nothing is held,
and no acknowledged job is lost. Real file store behind a fault injector;
the store is checked afterwards.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.errors import StorageRefused
from broker.model.format.segment_format import MAX_SEGMENT_JOBS
from broker.service.broker import Broker
from broker.service.by_reference import _Writer
from broker.storage.files import FileStore
from tests.support.faults import REFUSED, Clock, FaultyStore
from tests.support.inprocess import (
    bodies,
    payloads,
    run,
    segment_objects,
    stage_all,
    started,
    stored,
)

#: Jobs of a push of two slices: a full one and a short one.
TWO_SLICES = MAX_SEGMENT_JOBS + 1_000


def _seg(first_seq: int) -> str:
    """What the key of a segment object whose first job is ``first_seq`` holds."""
    return f"/seg-{first_seq:010d}-"


class _Held:
    """Segment writes held in the store until :meth:`land`: each reaches the
    store (in the store's thread), waits, then lands; :meth:`land` counts the
    ones done, on the event loop. :meth:`hold` starts holding (after the test's
    own faults, which are tried first)."""

    def __init__(self, store: FaultyStore) -> None:
        self.store = store
        self.events = asyncio.get_running_loop()
        self.go = threading.Event()
        self.landed = 0
        self._reached: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._all_landed = asyncio.Event()
        self._want = 0

    def hold(self) -> None:
        self.store.inject("create_if_absent", None, times=None, key_contains="/segments/",
                          before=self._before, after=self._after)

    def reached(self, *parts: str) -> Callable[[str], None]:
        """A ``before`` hook (in the store's thread) that waits until a held
        write of a key holding each of ``parts`` has reached the store."""
        with self._lock:
            events = [self._reached.setdefault(part, threading.Event()) for part in parts]

        def hook(_key: str) -> None:
            for event in events:
                assert event.wait(30), "a sibling's write never reached the store"

        return hook

    def _before(self, key: str) -> None:
        with self._lock:
            for part, event in self._reached.items():
                if part in key:
                    event.set()
        assert self.go.wait(30), "the held segment write was never let go"

    def _after(self, _key: str) -> None:
        self.events.call_soon_threadsafe(self._one_landed)

    def _one_landed(self) -> None:
        self.landed += 1
        if self.landed >= self._want:
            self._all_landed.set()

    async def land(self, count: int) -> None:
        """Let every held write go; return once ``count`` have landed."""
        self._want = count
        self.go.set()
        if self.landed < count:
            await self._all_landed.wait()


def _track_writes(broker: Broker) -> asyncio.Event:
    """An event set whenever no call of the broker's ``segments.write`` is under
    way: the writer's next step after a write (its hold) runs in the same step
    as the call's end, so once this is set after a write landed, that write's
    hold (if any) has happened."""
    segments = broker.segments
    real = segments.write
    idle = asyncio.Event()
    idle.set()
    busy = [0]

    async def write(*args, **kwargs):  # type: ignore[no-untyped-def]
        busy[0] += 1
        idle.clear()
        try:
            return await real(*args, **kwargs)
        finally:
            busy[0] -= 1
            if not busy[0]:
                idle.set()

    segments.write = write  # type: ignore[method-assign]
    return idle


async def _sweep_twice(broker: Broker, clock: Clock) -> None:
    """Two sweeps a grace period apart: the first lists, the second deletes."""
    await broker.sweep_staging()
    clock.advance(601)
    await broker.sweep_staging()


@pytest.fixture
def go_free() -> Iterator[list[threading.Event]]:
    """Events the test's held writes wait on, all set at the end (no thread
    is left waiting if the test fails)."""
    held: list[threading.Event] = []
    yield held
    for event in held:
        event.set()


@pytest.mark.slow  # (101,000 jobs go inline: make test only)
def test_writer_write_releases_a_slice_landing_after_a_line_break_sent_the_push_inline(
        tmp_path: Path, go_free: list[threading.Event]) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10)
        await a.push("q", bodies(1))
        idle = _track_writes(a)
        held = _Held(store)
        go_free.append(held.go)
        held.hold()
        jobs = bodies(TWO_SLICES, 1)
        jobs[-1] = b'{"n":\n%d}' % TWO_SLICES  # in the 2nd slice: refused before any write
        ids = await a.push("q", jobs)  # the 1st slice's write is still held
        assert len(ids) == TWO_SLICES and held.landed == 0
        await held.land(1)
        await idle.wait()
        assert len(segment_objects(store)) == 1  # written, never referenced
        await _sweep_twice(a, clock)
        assert segment_objects(store) == [] and a.segments._busy == {}
        head = stored(store)
        assert head.segment_refs == [] and len(head.jobs) == TWO_SLICES + 1
        assert sorted(p["n"] for p in payloads(store)) == list(range(TWO_SLICES + 1))
        await a.stop()

    run(go())


def test_writer_write_releases_a_slice_landing_after_a_sibling_failed_to_write(
        tmp_path: Path, go_free: list[threading.Event]) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10)
        await a.push("q", bodies(1))
        idle = _track_writes(a)
        # the 2nd slice's write is refused once the 1st slice's is held in the store
        first = 2  # (seq 1 is the job pushed before)
        held = _Held(store)
        go_free.append(held.go)
        store.inject("create_if_absent", REFUSED, key_contains=_seg(first + MAX_SEGMENT_JOBS),
                     before=held.reached(_seg(first)))
        held.hold()
        with pytest.raises(StorageRefused):
            await a.push("q", bodies(TWO_SLICES, 1), request="r-1")
        await held.land(1)
        await idle.wait()
        assert len(segment_objects(store)) == 1  # written, never referenced
        await _sweep_twice(a, clock)
        assert segment_objects(store) == [] and a.segments._busy == {}
        assert stored(store).segment_refs == []
        assert sorted(p["n"] for p in payloads(store)) == [0]  # the acknowledged job
        store.heal()
        assert len(await a.push("q", bodies(TWO_SLICES, 1), request="r-1")) == TWO_SLICES
        refs = sorted(ref.key for ref in stored(store).segment_refs)
        assert len(refs) == 2 and segment_objects(store) == refs
        assert sorted(p["n"] for p in payloads(store)) == list(range(TWO_SLICES + 1))
        await a.stop()

    run(go())


def test_publish_by_reference_releases_the_writes_under_way_when_one_fails(
        tmp_path: Path, go_free: list[threading.Event]) -> None:
    """A publish writes a batch of segments while it reads the next chunks:
    batch 1 (two slices) fails in its 2nd slice once batch 2's write is in the
    store; the publish fails and stops batch 2 (cancelled). Neither batch 1's
    1st slice nor batch 2's, landing afterwards, is held."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))
    per = [TWO_SLICES, MAX_SEGMENT_JOBS]  # a batch each (two slices, one)
    chunks = [b"".join(b'\t{"n":%d}\n' % (sum(per[:c]) + i) for i in range(n))
              for c, n in enumerate(per)]

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10)
        await a.push("q", [b'{"n":-1}'])
        keep = await stage_all(a, "q", chunks)
        idle = _track_writes(a)
        first = 2  # (seq 1 is the job pushed before)
        held = _Held(store)
        go_free.append(held.go)
        store.inject("create_if_absent", REFUSED, key_contains=_seg(first + MAX_SEGMENT_JOBS),
                     before=held.reached(_seg(first), _seg(first + TWO_SLICES)))
        held.hold()
        with pytest.raises(StorageRefused):
            await a.publish("q", "w-1/", keep, once="write:w-1")
        await held.land(2)
        await idle.wait()
        assert len(segment_objects(store)) == 2  # written, never referenced
        await _sweep_twice(a, clock)
        assert segment_objects(store) == [] and a.segments._busy == {}
        assert stored(store).segment_refs == []
        assert [p["n"] for p in payloads(store)] == [-1]  # the acknowledged job
        await a.stop()

    run(go())


def test_writer_keep_after_release_leaves_the_object_to_the_sweep(tmp_path: Path) -> None:
    """A segment write that lands after its push was answered (and released)
    is not held: the sweep deletes it after the grace period."""
    clock = Clock()
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10)
        await a.push("q", bodies(1))
        writer = _Writer(a._queues["q"].loop, a.segments, "q", clock.now_ms, clock.monotonic)
        early = await a.segments.write("q", 2, 0, clock.now_ms(), bodies(3), max_attempts=3)
        writer._keep(early.key)
        assert a.segments._busy == {early.key: 1}
        writer.release()
        late = await a.segments.write("q", 5, 0, clock.now_ms(), bodies(3), max_attempts=3)
        writer._keep(late.key)
        assert a.segments._busy == {} and writer.held == []
        await _sweep_twice(a, clock)
        assert segment_objects(store) == [] and stored(store).segment_refs == []
        await a.stop()

    run(go())
