"""QueueTarget's read-ahead of spill objects: once a commit lands, the pending
spill objects the next claims take from are read in the background, so the
batch that claims from them does not wait for the read (and every call in
that batch with it). A read ahead only adds what the claim's own read would
have; one that fails is read again by the claim, which answers as without it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from broker.model.job import CLAIMED
from broker.model.ops import FailItem, NewJob
from broker.service.broker import Broker
from broker.storage.files import FileStore
from tests.support.faults import EIO, FaultyStore
from tests.support.inprocess import run, started, stored, until
from tests.support.spill_store import spill_keys


class SpillReads:
    """The reads of spill objects a FaultyStore sees, by key (and holds them
    while ``gate`` is clear)."""

    def __init__(self, store: FaultyStore) -> None:
        self.keys: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        store.inject("read", None, times=None, key_contains="/spills/", before=self._seen)

    def _seen(self, key: str) -> None:
        self.keys.append(key)
        assert self.gate.wait(10.0), "a held spill read was never let go"

    def of(self, key: str) -> int:
        return self.keys.count(key)


async def _retrying(broker: Broker, n: int, reads: SpillReads | None = None) -> list[str]:
    """``n`` jobs (3 attempts) claimed and failed once with no retry delay: past
    ``spill_jobs`` they go into a pending spill object in the fail's commit (as
    they went into one on their push: the claim took them from it). With
    ``reads``, the spill reads after the claim are held."""
    ids = await broker.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=3) for i in range(n)])
    got = await broker.claim("q", "w", max_jobs=n)
    if reads is not None:
        reads.gate.clear()
    answers = await broker.fail("q", [FailItem(j.token, "boom", 0) for j in got])
    assert all(a.ok for a in answers)
    return list(ids)


def _claimed_once(store: FaultyStore, ids: list[str]) -> None:
    """The stored head holds each of ``ids`` once, claimed for its second attempt,
    and no spill ref (the object drained)."""
    state = stored(store)
    assert state.spill_refs == []
    jobs = [j for j in state.jobs.touched() if j.id in set(ids)]
    assert sorted(j.id for j in jobs) == sorted(ids)
    assert all(j.status == CLAIMED and j.attempts == 2 for j in jobs)


def test_a_landed_commit_reads_the_next_claims_spill_object_ahead(tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))
    reads = SpillReads(store)

    async def go() -> None:
        a = await started(store, spill_jobs=10, spill_pending=True)
        ids = await _retrying(a, 25)
        ref, = stored(store).spill_refs
        await until(lambda: reads.of(ref.key) == 1)  # (no claim asked yet)
        got = await a.claim("q", "w2", max_jobs=100)
        assert sorted(j.id for j in got) == sorted(ids)
        assert reads.of(ref.key) == 1  # the claim's batch read nothing more
        _claimed_once(store, ids)
        await until(lambda: spill_keys(store) == [])
        await a.stop()

    run(go())


def test_a_claim_waits_for_the_read_ahead_in_flight_instead_of_reading_again(
        tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))
    reads = SpillReads(store)

    async def go() -> None:
        a = await started(store, spill_jobs=10, spill_pending=True)
        ids = await _retrying(a, 25, reads)  # (the read ahead starts and is held)
        ref, = stored(store).spill_refs
        await until(lambda: reads.of(ref.key) == 1)
        claim = asyncio.get_running_loop().create_task(a.claim("q", "w2", max_jobs=100))
        await asyncio.sleep(0.05)
        assert not claim.done()  # (its batch waits for the read in flight)
        reads.gate.set()
        got = await asyncio.wait_for(claim, 10.0)
        assert sorted(j.id for j in got) == sorted(ids)
        assert reads.of(ref.key) == 1
        _claimed_once(store, ids)
        await a.stop()

    run(go())


def test_a_read_ahead_that_fails_is_read_again_by_the_claim(tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))
    failed: list[str] = []
    # (the second spill object's read ahead: the first is the push's, claimed from)
    store.inject("read", EIO, nth=2, key_contains="/spills/", before=failed.append)
    reads = SpillReads(store)

    async def go() -> None:
        a = await started(store, spill_jobs=10, spill_pending=True)
        ids = await _retrying(a, 25)
        ref, = stored(store).spill_refs
        await until(lambda: failed == [ref.key])
        got = await a.claim("q", "w2", max_jobs=100)
        assert sorted(j.id for j in got) == sorted(ids)
        assert all(j.attempt == 2 for j in got)
        assert reads.of(ref.key) == 1  # (the claim's own, after the failed read ahead)
        _claimed_once(store, ids)
        await until(lambda: spill_keys(store) == [])
        await a.stop()

    run(go())
