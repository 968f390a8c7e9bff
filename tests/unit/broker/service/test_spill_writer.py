"""broker.service.spill_writer through an in-process broker with ``spill_jobs``
on: past the threshold a commit writes the head's dead jobs into one spill
object before its CAS and references it in that same commit; under faults of
the spill write and of the commit's own write the store holds every dead job
exactly once (inline or in the spill the landed head references), and an
object no landed head references is swept after the grace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.errors import OutcomeUnknown
from broker.model.job import DEAD
from broker.model.ops import FailItem
from broker.service.broker import Broker
from broker.storage import ObjectStore
from broker.storage.files import FileStore
from tests.support.faults import (
    EIO,
    LOST_REPLY,
    LOST_REPLY_412,
    NOT_LANDED,
    Clock,
    FaultyStore,
)
from tests.support.inprocess import crash, run, started, stored, successor
from tests.support.pause import SkippedPause
from tests.support.spill_store import dead_everywhere, spill_keys

QUEUE_KEY = paths.state_key("q")
SPILLS = "/spills/"


@pytest.fixture(params=[False, True], ids=["pending_inline", "pending_spilled"])
def pending(request: pytest.FixtureRequest) -> bool:
    """``spill_pending`` off and on: the dead path's promises hold either way."""
    value = request.param
    assert isinstance(value, bool)
    return value


async def _started(store: ObjectStore, pending: bool, **config: Any) -> Broker:
    """A broker with ``spill_pending`` as given and queue ``q`` created with one
    attempt a job, so that its pushes are plain lines (no job objects: never
    pending spill candidates) and a failed job dies."""
    broker = await started(store, spill_pending=pending, **config)
    await broker.create_queue("q", {"max_attempts": 1})
    return broker


def _jobs(n: int) -> list[bytes]:
    return [b'{"n":%d}' % i for i in range(n)]


async def _fail_all(broker: Broker, n: int, error: str = "boom") -> list[str]:
    """Push ``n`` jobs with one attempt, claim them all, fail them: ``n`` dead.
    Returns their ids."""
    ids = await broker.push("q", _jobs(n))
    got = await broker.claim("q", "w", max_jobs=n)
    assert sorted(j.id for j in got) == sorted(ids)
    answers = await broker.fail("q", [FailItem(j.token, error, 0) for j in got])
    assert all(a.ok for a in answers)
    return list(ids)


def test_a_fail_past_spill_jobs_moves_the_dead_jobs_into_one_object(
        tmp_path: Path, pending: bool) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await _started(store, pending, spill_jobs=10)
        ids = await _fail_all(a, 25)
        state = stored(store)
        assert [j for j in state.jobs.touched() if j.status == DEAD] == []
        assert len(state.spill_refs) == 1 and state.spill_refs[0].count == 25
        assert dead_everywhere(store) == sorted(ids)
        assert (await a.stats("q"))["counts"]["dead"] == 25
        raw = orjson.loads(store.read(QUEUE_KEY).data)
        assert [ref["key"] for ref in raw["spills"]] == spill_keys(store)
        await a.stop()

    run(go())


def test_under_spill_jobs_the_dead_jobs_stay_inline(tmp_path: Path, pending: bool) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await _started(store, pending, spill_jobs=30)
        ids = await _fail_all(a, 25)
        state = stored(store)
        assert len([j for j in state.jobs.touched() if j.status == DEAD]) == 25
        assert state.spill_refs == [] and spill_keys(store) == []
        assert dead_everywhere(store) == sorted(ids)
        await a.stop()

    run(go())


def test_spill_jobs_0_never_spills(tmp_path: Path, pending: bool) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await _started(store, pending, spill_jobs=0)
        await _fail_all(a, 40)
        assert stored(store).spill_refs == [] and spill_keys(store) == []
        await a.stop()

    run(go())


@pytest.mark.parametrize("fault", [EIO, NOT_LANDED])
def test_a_spill_write_that_fails_leaves_the_jobs_inline_and_the_answers_unchanged(
        tmp_path: Path, fault: str, pending: bool) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await _started(store, pending, spill_jobs=10)
        store.inject("create_if_absent", fault, key_contains=SPILLS)
        ids = await _fail_all(a, 25)  # (every fail answered ok: asserted there)
        assert [m for m, k, key in store.injected if SPILLS in key] == ["create_if_absent"]
        state = stored(store)
        assert state.spill_refs == []
        assert len([j for j in state.jobs.touched() if j.status == DEAD]) == 25
        assert spill_keys(store) == []
        assert a._queues["q"].target.spills.failures == 1
        # the next commit tries again, and lands it
        await a.push("q", _jobs(1))
        assert len(stored(store).spill_refs) == 1
        assert dead_everywhere(store) == sorted(ids)
        await a.stop()

    run(go())


def test_a_lost_reply_on_the_spill_create_is_resolved_by_reading_it_back(
        tmp_path: Path, pending: bool) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await _started(store, pending, spill_jobs=10)
        store.inject("create_if_absent", LOST_REPLY_412, key_contains=SPILLS)
        ids = await _fail_all(a, 25)
        assert store.injected[-1][1] == LOST_REPLY_412
        state = stored(store)
        assert len(state.spill_refs) == 1
        assert spill_keys(store) == [state.spill_refs[0].key]
        assert dead_everywhere(store) == sorted(ids)
        await a.stop()

    run(go())


def test_a_lost_reply_without_an_answer_leaves_an_orphan_the_sweep_takes(
        tmp_path: Path, pending: bool) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        clock = Clock()
        a = await _started(store, pending, clock=clock, spill_jobs=10, segment_grace_s=60.0)
        store.inject("create_if_absent", LOST_REPLY, key_contains=SPILLS)
        ids = await _fail_all(a, 25)
        state = stored(store)
        assert state.spill_refs == []  # (its outcome unknown: the jobs stay inline)
        orphan, = spill_keys(store)
        await a.push("q", _jobs(1))  # the next commit spills them again, elsewhere
        state = stored(store)
        assert len(state.spill_refs) == 1 and state.spill_refs[0].key != orphan
        assert dead_everywhere(store) == sorted(ids)
        await _sweep_past_grace(a, clock, 60.0)
        assert spill_keys(store) == [state.spill_refs[0].key]
        assert dead_everywhere(store) == sorted(ids)
        await a.stop()

    run(go())


def test_a_cas_conflict_after_a_spill_leaves_the_jobs_in_the_landed_heads_spill_once(
        tmp_path: Path, pending: bool) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def go() -> None:
        clock = Clock()
        a = await _started(store, pending, clock=clock, spill_jobs=10, segment_grace_s=60.0)
        ids = await a.push("q", _jobs(25))
        got = await a.claim("q", "w", max_jobs=25)

        def foreign(_key: str) -> None:  # another write lands between read and CAS
            cur = inner.read(QUEUE_KEY)
            inner.write_if_match(QUEUE_KEY, cur.data, cur.etag)

        store.inject("write_if_match", None, key_contains=QUEUE_KEY, before=foreign)
        answers = await a.fail("q", [FailItem(j.token, "boom", 0) for j in got])
        assert all(x.ok for x in answers)
        assert a._queues["q"].loop.stats.conflicts >= 1
        state = stored(store)
        assert len(state.spill_refs) == 1
        keys = spill_keys(store)
        assert len(keys) == 2 and state.spill_refs[0].key in keys  # one orphan
        assert dead_everywhere(store) == sorted(ids)
        await _sweep_past_grace(a, clock, 60.0)
        assert spill_keys(store) == [state.spill_refs[0].key]
        assert dead_everywhere(store) == sorted(ids)
        await a.stop()

    run(go())


def test_a_crash_between_the_spill_write_and_the_cas_loses_no_job(
        tmp_path: Path, pending: bool) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def go() -> None:
        a = await _started(store, pending, clock=clock, spill_jobs=10, commit_timeout_s=1.0,
                           pause=SkippedPause())  # (the failing batch's backoff skipped)
        ids = await a.push("q", _jobs(25))
        got = await a.claim("q", "w", max_jobs=25)
        before = store.read(QUEUE_KEY).data
        # the spill lands; the broker dies before its head is written
        store.inject("write_if_match", NOT_LANDED, key_contains=QUEUE_KEY, times=None)
        with pytest.raises(OutcomeUnknown):
            await a.fail("q", [FailItem(j.token, "boom", 0) for j in got])
        await crash(a)
        store.heal()
        assert store.read(QUEUE_KEY).data == before
        assert len(spill_keys(store)) >= 1  # unreferenced
        assert stored(store).spill_refs == []
        b = await successor(store, clock, spill_jobs=10, spill_pending=pending)
        clock.advance(31_000)  # (their leases run out: reclaimed, dead with one attempt)
        await b.push("q", _jobs(1))
        state = stored(store)
        assert len(state.spill_refs) == 1
        assert dead_everywhere(store) == sorted(ids)
        await b.stop()

    run(go())


async def _sweep_past_grace(broker: Broker, clock: Clock, grace_s: float) -> None:
    """Sweep once (the listing starts the objects' grace), then again past it."""
    await broker.sweep_staging()
    clock.advance(grace_s + 1)
    await broker.sweep_staging()


def test_dead_jobs_claimed_from_a_segment_held_in_records_spill_and_come_back_once(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10, held_in_records=True, segment_push_jobs=10)
        await a.create_queue("q", {"max_attempts": 1})
        ids = await a.push("q", [b'{"n":%d}' % i for i in range(50)])
        assert len(stored(store).segment_refs) == 1
        got = await a.claim("q", "w", max_jobs=50)
        assert all(x.ok for x in await a.fail("q", [FailItem(j.token, "boom", 0) for j in got]))
        state = stored(store)
        assert [(ref.count, ref.kind) for ref in state.spill_refs] == [(50, DEAD)]
        assert not state.claim_records and dead_everywhere(store) == sorted(ids)
        assert await a.redrive("q") == 50
        assert sorted(j.id for j in await a.claim("q", "w", max_jobs=100)) == sorted(ids)
        await a.stop()

    run(go())
