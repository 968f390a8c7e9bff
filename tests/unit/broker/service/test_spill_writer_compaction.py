"""broker.service.spill_writer's compaction through an in-process broker: once
small dead spill objects pile up (past COMPACT_REFS, lowered here to 3), a
commit starts their merge in the background (read, merged, written under a
fresh key) and a later commit references the merged object in their place,
before its CAS; the old objects go only once that commit landed. Under faults of the
merged object's write, of the commit's CAS (a conflict, a lost reply, a crash
between the two) and of the owner killed after it landed, the store holds
every dead job exactly once, no referenced object is missing, and what no
landed head references is swept."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker import paths
from broker.errors import OutcomeUnknown, SegmentMissing
from broker.model import spill_compaction
from broker.model.format.spill_format import read_checked
from broker.model.job import DEAD
from broker.model.ops import FailItem, NewJob
from broker.service.broker import Broker
from broker.storage.files import FileStore
from tests.support.faults import (
    EIO,
    LOST_REPLY,
    LOST_REPLY_412,
    NOT_LANDED,
    Clock,
    FaultyStore,
)
from tests.support.inprocess import crash, run, started, stored, successor, until
from tests.support.pause import SkippedPause
from tests.support.spill_store import dead_everywhere, spill_keys

#: dead jobs spilled past one; pending ones (pushed with options) kept inline
DEAD_SPILLS = {"spill_jobs": 1, "spill_pending": False}

QUEUE_KEY = paths.state_key("q")
SPILLS = "/spills/"
ROUNDS = 4  # (one past the lowered COMPACT_REFS: the next commit merges)


@pytest.fixture(autouse=True)
def _few_refs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill_compaction, "COMPACT_REFS", 3)


async def _spilled_rounds(broker: Broker, rounds: int = ROUNDS, per: int = 2) -> list[str]:
    """``rounds`` times: push ``per`` jobs of one attempt, claim and fail them
    (past spill_jobs 1: each round one dead spill object). Their ids."""
    ids: list[str] = []
    for r in range(rounds):
        got_ids = await broker.push("q", [NewJob(b'{"r":%d,"n":%d}' % (r, i), max_attempts=1)
                                          for i in range(per)])
        got = await broker.claim("q", "w", max_jobs=per)
        answers = await broker.fail("q", [FailItem(j.token, f"boom {j.id}", 0) for j in got])
        assert all(a.ok for a in answers)
        ids += got_ids
    return sorted(ids)


async def _merge_ready(broker: Broker, done: int | None = None) -> None:
    """Wait until the merge a commit started has its objects written (or a
    commit of the broker's own, a timer's, has landed it already: more than
    ``done`` merges landed, by default as many as now)."""
    writer = broker._queues["q"].target.spills
    done = writer.compactions if done is None else done
    await until(lambda: writer.ready is not None or writer.compactions > done)


async def _merged(broker: Broker, n: int, done: int = 0) -> None:
    """A commit that starts the merge, then one that lands it (``n`` a payload
    tag; ``done``: the merges landed before, as for :func:`_merge_ready`, since
    a commit of the broker's own may have started this one already)."""
    await broker.push("q", [b'{"start":%d}' % n])
    await _merge_ready(broker, done)
    await broker.push("q", [b'{"land":%d}' % n])


def _live_keys(store: FileStore | FaultyStore) -> list[str]:
    return sorted(ref.key for ref in stored(store).spill_refs)


async def _sweep_past_grace(broker: Broker, clock: Clock, grace_s: float = 60.0) -> None:
    await broker.sweep_staging()
    clock.advance(grace_s + 1)
    await broker.sweep_staging()


def test_small_dead_objects_past_the_bound_are_merged_into_one(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, **DEAD_SPILLS)
        ids = await _spilled_rounds(a)
        olds = _live_keys(store)
        assert len(olds) == ROUNDS
        # any commit starts their merge: this one takes a job out of its object first
        assert await a.redrive("q", [ids[0]]) == 1
        assert len(stored(store).spill_refs) == ROUNDS
        await _merge_ready(a)
        await a.push("q", [b'{"x":1}'])  # (this one puts it in)
        ref, = stored(store).spill_refs
        assert ref.kind == DEAD and ref.count == len(ids) - 1 and ref.key not in olds
        await until(lambda: spill_keys(store) == [ref.key])  # (the old ones deleted)
        assert dead_everywhere(store) == ids[1:]
        got = store.read(ref.key)
        for job in read_checked(ref, got.data, got.etag, store.url, 0, ref.count):
            assert job.last_error == f"boom {job.id}" and job.attempts == 1
        assert (await a.stats("q"))["counts"]["dead"] == len(ids) - 1
        assert (await a.job("q", ids[3]))["status"] == DEAD
        page = await a.jobs("q", DEAD, limit=100)
        assert sorted(j["id"] for j in page) == ids[1:]
        assert a._queues["q"].target.spills.compactions == 1
        assert await a.redrive("q") == len(ids) - 1
        got_jobs = await a.claim("q", "w2", max_jobs=100)
        assert sorted(j.id for j in got_jobs if j.id in ids) == ids
        await a.stop()

    run(go())


@pytest.mark.parametrize("fault", [EIO, NOT_LANDED, LOST_REPLY])
def test_a_merge_whose_write_fails_leaves_the_refs_as_they_were(
        tmp_path: Path, fault: str) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        clock = Clock()
        a = await started(store, clock=clock, **DEAD_SPILLS, segment_grace_s=60.0)
        ids = await _spilled_rounds(a)
        olds = _live_keys(store)
        store.inject("create_if_absent", fault, key_contains=SPILLS)
        writer = a._queues["q"].target.spills
        await a.push("q", [b'{"x":1}'])  # (starts the merge, which fails)
        await until(lambda: writer.compaction_failures == 1)
        assert [m for m, _, key in store.injected if SPILLS in key] == ["create_if_absent"]
        await a.push("q", [b'{"x":2}'])  # (nothing to put in: it starts the merge again)
        assert _live_keys(store) == olds
        assert dead_everywhere(store) == ids
        await _merge_ready(a)
        await a.push("q", [b'{"x":3}'])  # the next commit lands it
        ref, = stored(store).spill_refs
        assert dead_everywhere(store) == ids
        await until(lambda: ref.key in spill_keys(store) and not set(olds) & set(
            spill_keys(store)))
        await _sweep_past_grace(a, clock)  # (a lost reply's object: referenced by no head)
        assert spill_keys(store) == [ref.key]
        await a.stop()

    run(go())


def test_a_cas_conflict_of_the_commit_with_a_merge_lands_it_once(
        tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def go() -> None:
        clock = Clock()
        a = await started(store, clock=clock, **DEAD_SPILLS, segment_grace_s=60.0)
        ids = await _spilled_rounds(a)
        olds = _live_keys(store)

        def foreign(_key: str) -> None:  # another write lands between read and CAS
            cur = inner.read(QUEUE_KEY)
            inner.write_if_match(QUEUE_KEY, cur.data, cur.etag)

        await a.push("q", [b'{"x":0}'])  # (starts the merge)
        await _merge_ready(a)
        store.inject("write_if_match", None, key_contains=QUEUE_KEY, before=foreign)
        await a.push("q", [b'{"x":1}'])
        assert a._queues["q"].loop.stats.conflicts >= 1
        ref, = stored(store).spill_refs  # (the retry on the re-read head put it in again)
        assert ref.key not in olds and dead_everywhere(store) == ids
        await until(lambda: spill_keys(store) == [ref.key])  # (the old ones went)
        await _sweep_past_grace(a, clock)
        assert spill_keys(store) == [ref.key]
        assert dead_everywhere(store) == ids
        await a.stop()

    run(go())


@pytest.mark.parametrize("fault", [LOST_REPLY, LOST_REPLY_412])
def test_a_merge_whose_commit_reply_is_lost_lands_once(tmp_path: Path, fault: str) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        clock = Clock()
        a = await started(store, clock=clock, **DEAD_SPILLS, segment_grace_s=60.0)
        ids = await _spilled_rounds(a)
        olds = _live_keys(store)
        await a.push("q", [b'{"x":0}'])  # (starts the merge)
        await _merge_ready(a)
        store.inject("write_if_match", fault, key_contains=QUEUE_KEY)
        try:
            await a.push("q", [b'{"x":1}'])
        except OutcomeUnknown:
            pass  # (answered unknown: the store says what landed)
        await a.push("q", [b'{"x":2}'])
        ref, = stored(store).spill_refs
        assert ref.key not in olds and dead_everywhere(store) == ids
        # (the old ones are deleted once a landed commit is seen to drop them, else swept)
        await _sweep_past_grace(a, clock)
        assert spill_keys(store) == [ref.key]
        assert await a.redrive("q") == len(ids)
        await a.stop()

    run(go())


def test_a_crash_between_the_merge_and_the_cas_loses_no_job(tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, **DEAD_SPILLS, commit_timeout_s=1.0,
                          segment_grace_s=60.0, pause=SkippedPause())  # (backoff skipped)
        ids = await _spilled_rounds(a)
        olds = _live_keys(store)
        await a.push("q", [b'{"x":0}'])  # (starts the merge)
        await _merge_ready(a)
        before = store.read(QUEUE_KEY).data
        # the merged object is written; the broker dies before a head references it
        store.inject("write_if_match", NOT_LANDED, key_contains=QUEUE_KEY, times=None)
        with pytest.raises(OutcomeUnknown):
            await a.push("q", [b'{"x":1}'])
        await crash(a)
        store.heal()
        assert store.read(QUEUE_KEY).data == before
        keys = spill_keys(store)
        assert set(olds) < set(keys)  # (every old one still there; the merged one too)
        b = await successor(store, clock, **DEAD_SPILLS, segment_grace_s=60.0)
        await _merged(b, 2)  # (it takes the queue over and merges again)
        ref, = stored(store).spill_refs
        assert ref.key not in keys and dead_everywhere(store) == ids
        await until(lambda: not set(olds) & set(spill_keys(store)))
        await _sweep_past_grace(b, clock)
        assert spill_keys(store) == [ref.key]
        await b.stop()

    run(go())


def test_an_owner_killed_after_its_merge_landed_leaves_the_old_objects_to_the_sweep(
        tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, **DEAD_SPILLS, segment_grace_s=60.0)
        ids = await _spilled_rounds(a)
        olds = _live_keys(store)
        store.inject("delete", NOT_LANDED, key_contains=SPILLS, times=None)  # (killed first)
        await _merged(a, 1)
        await crash(a)
        ref, = stored(store).spill_refs
        assert set(olds) < set(spill_keys(store)) and dead_everywhere(store) == ids
        store.heal()
        b = await successor(store, clock, **DEAD_SPILLS, segment_grace_s=60.0)
        await b.push("q", [b'{"x":2}'])
        await _sweep_past_grace(b, clock)
        assert spill_keys(store) == [ref.key] and dead_everywhere(store) == ids
        assert await b.redrive("q") == len(ids)
        got = await b.claim("q", "w2", max_jobs=100)
        assert sorted(j.id for j in got if j.id in ids) == ids
        await b.stop()

    run(go())


def test_a_merged_object_gone_missing_is_refused_at_load_naming_it(tmp_path: Path) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)

    async def go() -> None:
        a = await started(inner, clock=clock, **DEAD_SPILLS)
        await _spilled_rounds(a)
        await _merged(a, 1)
        ref, = stored(inner).spill_refs
        await a.stop()
        inner.delete(ref.key)
        before = inner.read(QUEUE_KEY).data
        b = await successor(inner, clock, **DEAD_SPILLS)
        with pytest.raises(SegmentMissing, match=ref.key):
            await b.push("q", [b'{"x":2}'])
        assert inner.read(QUEUE_KEY).data == before
        await b.stop()

    run(go())


def test_a_merge_whose_old_objects_changed_meanwhile_is_given_up(tmp_path: Path) -> None:
    clock = Clock()
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, clock=clock, **DEAD_SPILLS, segment_grace_s=60.0)
        ids = await _spilled_rounds(a)
        await a.push("q", [b'{"x":0}'])  # (starts the merge)
        await _merge_ready(a)
        writer = a._queues["q"].target.spills
        merged_key = writer.ready[1][0].key if writer.ready else ""
        assert merged_key in spill_keys(store)
        # a job leaves its object before the merge is put in: it holds that job
        assert await a.redrive("q", [ids[2]]) == 1
        assert writer.ready is None and len(stored(store).spill_refs) == ROUNDS
        assert dead_everywhere(store) == [i for i in ids if i != ids[2]]
        await _sweep_past_grace(a, clock)  # (the given-up object: referenced by no head)
        assert merged_key not in spill_keys(store)
        await _merged(a, 1)  # (merged again, from the objects as they are now)
        ref, = stored(store).spill_refs
        assert ref.count == len(ids) - 1
        assert dead_everywhere(store) == [i for i in ids if i != ids[2]]
        await a.stop()

    run(go())
