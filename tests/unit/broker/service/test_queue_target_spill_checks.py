"""QueueTarget's check of the spill objects a head references, when a broker
takes a queue over: the HEADs run concurrently, at most SPILL_CHECKS at once
(shown by a barrier the first SPILL_CHECKS of them must all reach together,
which sequential checks never would: it breaks after its timeout, failing the
takeover), every object checked once; a missing one is still refused, naming
it, with the head left byte-identical."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from broker import paths
from broker.errors import SegmentMissing
from broker.model import spill_compaction
from broker.model.ops import FailItem, NewJob
from broker.service.broker import Broker
from broker.service.queue_target import SPILL_CHECKS
from broker.storage.files import FileStore
from tests.support.faults import Clock, FaultyStore
from tests.support.inprocess import run, started, stored, successor

#: dead jobs spilled past one; pending ones (pushed with options) kept inline
DEAD_SPILLS = {"spill_jobs": 1, "spill_pending": False}

SPILLS = "/spills/"
OBJECTS = SPILL_CHECKS + 5
QUEUE_KEY = paths.state_key("q")


@pytest.fixture(autouse=True)
def _no_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill_compaction, "COMPACT_REFS", 1000)  # (one object per round, kept)


async def _dead_objects(broker: Broker, rounds: int) -> None:
    for r in range(rounds):
        await broker.push("q", [NewJob(b'{"r":%d,"n":%d}' % (r, i), max_attempts=1)
                                for i in range(2)])
        got = await broker.claim("q", "w", max_jobs=2)
        await broker.fail("q", [FailItem(j.token, "boom", 0) for j in got])


class Heads:
    """Hooks around the store's HEADs of spill objects: counts those in flight
    (the most at once), and holds the first ``together`` at a barrier."""

    def __init__(self, together: int) -> None:
        self.lock = threading.Lock()
        self.in_flight = self.most = self.seen = 0
        self.keys: list[str] = []
        self.barrier = threading.Barrier(together, timeout=30)
        self.together = together

    def before(self, key: str) -> None:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.keys.append(key)
            self.seen += 1
            wait = self.seen <= self.together
        if wait:
            self.barrier.wait()  # (BrokenBarrierError after the timeout: sequential)

    def after(self, _key: str) -> None:
        with self.lock:
            self.in_flight -= 1


def test_a_takeover_checks_the_spill_objects_concurrently_each_once(tmp_path: Path) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def go() -> None:
        a = await started(inner, clock=clock, **DEAD_SPILLS)
        await _dead_objects(a, OBJECTS)
        await a.stop()
        refs = stored(inner).spill_refs
        assert len(refs) == OBJECTS
        heads = Heads(SPILL_CHECKS)
        store.inject("head", None, key_contains=SPILLS, times=None, before=heads.before,
                     after=heads.after)
        b = await successor(store, clock, **DEAD_SPILLS)
        await b.push("q", [b'{"x":1}'])  # (takes the queue over: checks every ref)
        assert heads.most == SPILL_CHECKS
        assert sorted(heads.keys) == sorted(ref.key for ref in refs)
        await b.push("q", [b'{"x":2}'])  # (checked once: no HEAD again)
        assert len(heads.keys) == OBJECTS
        await b.stop()

    run(go())


def test_a_missing_spill_object_is_refused_at_takeover_naming_it(tmp_path: Path) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)

    async def go() -> None:
        a = await started(inner, clock=clock, **DEAD_SPILLS)
        await _dead_objects(a, OBJECTS)
        await a.stop()
        refs = stored(inner).spill_refs
        gone = refs[-3].key
        inner.delete(gone)
        before = inner.read(QUEUE_KEY).data
        b = await successor(inner, clock, **DEAD_SPILLS)
        with pytest.raises(SegmentMissing, match=gone):
            await b.push("q", [b'{"x":1}'])
        assert inner.read(QUEUE_KEY).data == before
        await b.stop()

    run(go())
