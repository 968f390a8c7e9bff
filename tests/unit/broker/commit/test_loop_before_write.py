"""The commit loop's ``before_write`` hook (CommitTarget.before_write, broker/commit/loop.py):
it runs once a batch has applied and before the state is encoded and written, once
for each write attempt; objects it writes land before the version that references
them; a hook that raises answers the whole batch and drops the state (nothing
written); after a CAS conflict the batch is re-applied and the hook writes again,
so the first attempt's object is left unreferenced and the sweep deletes it after
the grace. The queue's own target has a no-op hook.

The target here is a toy (a tally in a JSON object at a queue's key) whose hook
writes a spill object through the real SegmentStore and references it in a
``"spills"`` list, as the queue's spill objects will be; real file store, store
checked after each test."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.commit.loop import CommitLoop
from broker.commit.offloop import run_bulk, run_io
from broker.errors import OsqueueError, OutcomeUnknown
from broker.model.format import codec
from broker.service.segment_store import SegmentStore
from broker.storage import FileStore, ObjectStore
from tests.support.commit_targets import Tally
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import run, started

KEY = paths.state_key("q")
GRACE_S = 600.0


class _Spilling(Tally):
    """A :class:`~tests.support.commit_targets.Tally` whose versions reference
    objects written by its hook.

    State: ``{"total", "seq", "commit", "lineage", "spills": [{"key", "etag"}]}``;
    an op (an int) adds to the total. With ``spill`` set, ``before_write`` writes
    one spill object naming the total it was written for, holds it from the sweep
    and references it; every object it wrote is released when a version is
    committed (by us or re-read), as the queue's target will do. ``raising``:
    what the next hooks raise, one each (None: that one does not raise), after
    writing their object (with ``spill``)."""

    def __init__(self, objects: SegmentStore, store: ObjectStore) -> None:
        self.objects = objects
        self.store = store
        self.spill = True
        self.raising: list[Exception | None] = []
        self.seen: list[dict[str, Any]] = []  # per hook: what it saw
        self.written: list[str] = []
        self._held: list[str] = []

    def empty(self, now_ms: int) -> dict[str, Any]:
        return {"total": 0, "seq": 0, "commit": None, "lineage": [], "spills": []}

    async def before_write(self, state: dict[str, Any], now_ms: int) -> None:
        stored = orjson.loads(self.store.get(KEY)) if KEY in self.store.list("q/") else None
        self.seen.append({"total": state["total"],
                          "stored_total": stored and stored["total"],
                          "stored_seq": stored and stored["seq"], "now_ms": now_ms})
        if self.spill:
            body = orjson.dumps({"for_total": state["total"]}) + b"\n"
            key, etag = await self.objects.write_spill("q", "dead", state["seq"] + 1, body)
            self._held.append(key)
            self.written.append(key)
            state["spills"].append({"key": key, "etag": etag})
        failure = self.raising.pop(0) if self.raising else None
        if failure is not None:
            raise failure

    def committed(self, state: dict[str, Any]) -> None:
        held, self._held = self._held, []
        self.objects.release(held)


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    ex = ThreadPoolExecutor(2)
    yield ex
    ex.shutdown()


def objects_of(store: ObjectStore, executor: ThreadPoolExecutor, clock: Clock) -> SegmentStore:
    return SegmentStore(store, functools.partial(run_io, executor),
                        functools.partial(run_bulk, executor),
                        grace_s=GRACE_S, monotonic=clock.monotonic)


@asynccontextmanager
async def looping(store: ObjectStore, target: _Spilling, executor: ThreadPoolExecutor,
                  clock: Clock) -> AsyncIterator[CommitLoop[dict[str, Any], int, int]]:
    loop: CommitLoop[dict[str, Any], int, int] = CommitLoop(
        store, KEY, target, "w", executor, clock=clock.now_ms, commit_timeout_s=5.0)
    await loop.load()
    loop.reactivate()
    loop.start()
    try:
        yield loop
    finally:
        await loop.close(5)


def head(store: ObjectStore) -> dict[str, Any]:
    got: dict[str, Any] = orjson.loads(store.get(KEY))
    return got


def spill_objects(store: ObjectStore) -> list[str]:
    return sorted(store.list(paths.spills_prefix("q")))


def test_the_hook_runs_after_apply_and_before_the_write_its_object_lands_first(
        tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    """The hook sees the batch applied (the whole batch: one hook a write) while
    the store still holds the previous version; the version written references
    the object, which exists at that etag holding what the hook wrote."""
    store = FileStore(tmp_path)
    clock = Clock()
    target = _Spilling(objects_of(store, executor, clock), store)

    async def main() -> list[int]:
        async with looping(store, target, executor, clock) as loop:
            first = await loop.submit(5)
            rest = await asyncio.gather(loop.submit(1), loop.submit(2))
            return [first, *rest]

    assert run(main()) == [5, 6, 8]
    assert [(s["total"], s["stored_total"], s["stored_seq"]) for s in target.seen] == [
        (5, None, None), (8, 5, 1)]  # (the 1 and the 2 went in one batch)
    landed = head(store)
    assert (landed["total"], landed["seq"]) == (8, 2)
    assert [r["key"] for r in landed["spills"]] == target.written
    for ref in landed["spills"]:
        got = store.read(ref["key"])
        assert got.etag == ref["etag"]
    assert orjson.loads(store.get(landed["spills"][-1]["key"])) == {"for_total": 8}
    assert spill_objects(store) == sorted(target.written)


def test_a_hook_that_raises_answers_the_batch_and_drops_the_state(
        tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    """Every caller of the batch gets the error, nothing is written (the store is
    byte-identical), and the loop re-reads: the next batch applies to the
    committed version, not to the dropped one that had the failed batch in it."""
    store = FileStore(tmp_path)
    clock = Clock()
    target = _Spilling(objects_of(store, executor, clock), store)
    target.spill = False

    async def main() -> None:
        async with looping(store, target, executor, clock) as loop:
            assert await loop.submit(5) == 5
            before = store.get(KEY)
            target.raising = [ZeroDivisionError("a bug in the hook")]
            got = await asyncio.gather(loop.submit(1), loop.submit(2),
                                       return_exceptions=True)
            assert all(isinstance(g, OsqueueError) and "ZeroDivisionError" in g.message
                       for g in got), got
            assert store.get(KEY) == before
            assert loop.state is None  # dropped: re-read before the next batch
            assert await loop.submit(10) == 15

    run(main())
    assert (head(store)["total"], head(store)["seq"]) == (15, 2)


def test_a_hook_that_raises_after_an_attempt_that_may_land_answers_outcome_unknown(
        tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    """The first write timed out (not landed, but nobody knows): the batch applies
    again and its hook raises. The callers cannot be told the batch failed, since
    the first attempt may still land: OutcomeUnknown. The store keeps the last
    committed version; the objects of both attempts are unreferenced."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock()
    target = _Spilling(objects_of(store, executor, clock), store)

    async def main() -> None:
        async with looping(store, target, executor, clock) as loop:
            assert await loop.submit(5) == 5
            before = inner.get(KEY)
            store.inject("write_if_match", NOT_LANDED, key_contains=KEY)
            target.raising = [None, ValueError("a bug in the hook")]  # (the 2nd attempt's)
            with pytest.raises(OutcomeUnknown):
                await loop.submit(1)
            assert store.injected and inner.get(KEY) == before

    run(main())
    assert len(target.seen) == 3  # the first batch's, the timed-out attempt's, the raising one's
    referenced = [r["key"] for r in head(inner)["spills"]]
    assert referenced == target.written[:1]
    assert spill_objects(inner) == sorted(target.written)


def test_after_a_cas_conflict_the_first_attempts_object_is_unreferenced_and_swept(
        tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    """A write that loses the CAS to another version (a real 412 from the store):
    the loop re-reads, applies the batch to the fresh version and the hook writes a
    new object, which the landed version references. The first attempt's object
    is referenced by nothing: the sweep keeps it within the grace, then deletes it
    and only it. Store checked."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock()
    objects = objects_of(store, executor, clock)
    target = _Spilling(objects, store)

    def another_version(_key: str) -> None:  # lands first: ours then gets a real 412
        got = inner.read(KEY)
        state = orjson.loads(got.data)
        state.update(total=state["total"] + 100, seq=state["seq"] + 1, commit="c-other",
                     lineage=(state["lineage"] + ["c-other"])[-8:])
        inner.write_if_match(KEY, orjson.dumps(state), got.etag)

    async def main() -> None:
        async with looping(store, target, executor, clock) as loop:
            assert await loop.submit(5) == 5
            store.inject("write_if_match", None, key_contains=KEY, before=another_version)
            assert await loop.submit(1) == 106
            assert loop.stats.conflicts == 1
            in_memory = {r["key"] for r in (loop.state or {}).get("spills", [])}
            landed = functools.partial(objects.landed_refs, "q")
            [first_spill, lost, won] = target.written
            assert spill_objects(inner) == sorted(target.written)
            assert await objects.sweep("q", in_memory, landed=landed) == 0
            clock.advance(GRACE_S - 1)
            assert await objects.sweep("q", in_memory, landed=landed) == 0
            assert lost in spill_objects(inner)
            clock.advance(1)
            assert await objects.sweep("q", in_memory, landed=landed) == 1
            assert spill_objects(inner) == sorted([first_spill, won])

    run(main())
    landed = head(inner)
    assert (landed["total"], landed["seq"]) == (106, 3)
    [first_spill, _lost, won] = target.written
    assert [r["key"] for r in landed["spills"]] == [first_spill, won]
    assert orjson.loads(inner.get(won)) == {"for_total": 106}
    for ref in landed["spills"]:  # every object the head references exists at its etag
        assert inner.read(ref["key"]).etag == ref["etag"]
    assert sorted(inner.list("q/")) == sorted([KEY, first_spill, won])


def test_the_queue_targets_hook_changes_nothing(tmp_path: Path) -> None:
    """The queue's target writes no object yet: its hook leaves the state's bytes
    as they were, and writes nothing to the store."""
    store = FileStore(tmp_path)

    async def main() -> None:
        broker = await started(store)
        try:
            await broker.push("q", [b'{"n":1}', b'{"n":2}'])
            await broker.claim("q", "w", 1, 30.0)
            served = broker.served("q")
            assert served is not None and served.loop.state is not None
            state = served.loop.state
            before = b"".join(codec.encode_parts(state))
            objects = sorted(store.list("q/"))
            await served.target.before_write(state, 0)
            assert b"".join(codec.encode_parts(state)) == before
            assert sorted(store.list("q/")) == objects
        finally:
            await broker.stop(drain_s=5)

    run(main())
