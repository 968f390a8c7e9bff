"""Staging's sweep and publish clean-up over keys the store refuses: a staging
object whose key has a '.' or empty part (left on a cloud store by another
tool or an older broker, whose write ids allowed 'a/./b') is refused by every
store call since keys are checked (broker.storage.base.check_key). It must be
skipped, not stop the sweep or the publish's clean-up of the objects after it."""

from __future__ import annotations

import logging

import pytest

from broker.storage.base import Versioned
from broker.storage.memory import MemoryStore
from tests.support.faults import Clock
from tests.support.inprocess import run, started, stored

ODD = "q/staging/a/./b.jsonl"  # sorts before every write id below


def _with_odd_key(store: MemoryStore) -> None:
    store._objects[ODD] = Versioned(b"\t1\n", "odd")  # as listed, bypassing the key check


def test_the_sweep_removes_the_objects_after_a_key_the_store_refuses(
        caplog: pytest.LogCaptureFixture) -> None:
    """The vanished writer's object listed after the odd key is swept once its
    ttl has passed; the odd object is left in place, logged once."""
    clock = Clock()
    store = MemoryStore()

    async def main() -> None:
        a = await started(store, clock=clock)
        await a.create_queue("q", {"staged_ttl_s": 60})
        _with_odd_key(store)
        await a.stage("q", "w-4/c0", b"\t1\n")
        assert await a.sweep_staging() == 0  # first seen now
        clock.advance(61)
        assert await a.sweep_staging() == 1
        assert await a.sweep_staging() == 0
        await a.stop(drain_s=5)

    with caplog.at_level(logging.WARNING, logger="osqueue.broker"):
        run(main())
    assert store.list("q/staging/") == [ODD]
    assert sum("left in place" in r.getMessage() for r in caplog.records) == 1


def test_a_publish_drops_every_other_object_under_its_prefix_past_a_refused_key() -> None:
    """A publish under prefix 'a/' keeps its chunk and drops the other staged
    chunk, skipping the odd key between them: one job pushed once, the store
    left with the odd object only."""
    store = MemoryStore()

    async def main() -> dict:
        a = await started(store)
        await a.create_queue("q")
        _with_odd_key(store)
        await a.stage("q", "a/0", b"\t1\n")
        await a.stage("q", "a/z", b"\t2\n")
        out = await a.publish("q", "a/", ["a/z"], "write:a/")
        await a.stop(drain_s=5)
        return out

    assert run(main()) == {"published": 1, "discarded": 1, "duplicate": False}
    assert [j.payload for j in stored(store).jobs.values()] == [b"2"]
    assert store.list("q/staging/") == [ODD]
