"""The dashboard's job browser paged backwards (``page`` with ``before_seq``,
through an in-process broker's served queue) over dead jobs spread across
more spill objects than a step loads (MAX_WINDOWS), with inline dead and
pending jobs between them: walking back from past the end by ``has_prev``
shows every job once, in the order walking forwards does, and a page back
from any seq is the jobs just before it; ``has_next`` sees spilled jobs
after a page. Also after one of the objects is merged (compaction) and
after a redrive by id took a job out of its object. A page back over a
missing object fails naming it, the head unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker import paths
from broker.errors import SegmentMissing
from broker.model import spill_compaction
from broker.model.job import DEAD
from broker.model.ops import FailItem, Inspect, NewJob
from broker.model.state import MAX_WINDOWS
from broker.service.broker import Broker
from broker.service.served_queue import ServedQueue
from broker.storage.files import FileStore
from tests.support.inprocess import run, started, stored, until

#: dead jobs spilled past one; pending ones (pushed with options) kept inline
DEAD_SPILLS = {"spill_jobs": 1, "spill_pending": False}

OBJECTS = MAX_WINDOWS + 4


@pytest.fixture(autouse=True)
def _no_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill_compaction, "COMPACT_REFS", 1000)  # (one object per round, kept)


async def _queue(broker: Broker) -> ServedQueue:
    """OBJECTS rounds, each: a pending job of low priority (left pending), then
    two jobs of one attempt claimed and failed (past spill_jobs 1: one dead
    object a round); every third round one more that dies and stays inline."""
    for r in range(OBJECTS):
        await broker.push("q", [NewJob(b'{"pending":%d}' % r, priority=-1)])
        n = 3 if r % 3 == 2 else 2
        await broker.push("q", [NewJob(b'{"r":%d,"n":%d}' % (r, i), max_attempts=1)
                                for i in range(n)])
        got = await broker.claim("q", "w", max_jobs=n)
        await broker.fail("q", [FailItem(j.token, "boom", 0) for j in got[:2]])
        if n == 3:  # (alone it is under spill_jobs... until the next round spills it)
            await broker.fail("q", [FailItem(got[2].token, "boom", 0)])
    q = broker.served("q")
    assert q is not None
    return q


async def _page(q: ServedQueue, status: str | None, after: int | None, before: int | None,
                limit: int) -> dict[str, Any]:
    got: dict[str, Any] = await q.read(Inspect("page", (status, after, before, limit)))
    return got


def _seqs(page: dict[str, Any]) -> list[int]:
    return [row["seq"] for row in page["rows"]]


async def _forwards(q: ServedQueue, status: str | None, limit: int) -> list[int]:
    walked: list[int] = []
    page = await _page(q, status, None, None, limit)
    while True:
        walked += _seqs(page)
        if not page["has_next"]:
            return walked
        page = await _page(q, status, _seqs(page)[-1] if _seqs(page) else
                           page["resume_after"], None, limit)


async def _backwards(q: ServedQueue, status: str | None, before: int, limit: int) -> list[int]:
    back: list[int] = []
    page = await _page(q, status, None, before, limit)
    for _ in range(1000):
        back = _seqs(page) + back
        if not page["has_prev"]:
            return back
        assert back, "a page backwards came back empty with more before it"
        page = await _page(q, status, None, back[0], limit)
        assert page["has_next"]  # (the jobs already walked)
    raise AssertionError("paging backwards made no progress")


@pytest.mark.parametrize("status", [DEAD, None])
def test_paging_backwards_shows_every_spilled_job_once_as_forwards(
        tmp_path: Path, status: str | None) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, **DEAD_SPILLS)
        q = await _queue(a)
        state = stored(store)
        assert len(state.spill_refs) >= OBJECTS
        forwards = await _forwards(q, status, 5)
        dead = sorted(seq for ref in state.spill_refs for seq in range(
            ref.seqs[0], ref.seqs[1] + 1) if seq in forwards)
        assert len(dead) >= 2 * OBJECTS and forwards == sorted(set(forwards))
        end = forwards[-1] + 1
        for limit in (1, 4, 7):
            assert await _backwards(q, status, end, limit) == forwards
        for cursor in forwards[::5]:  # (a page back from any seq: the jobs just before)
            got = _seqs(await _page(q, status, None, cursor, 4))
            before = [s for s in forwards if s < cursor]
            assert (got and got == before[-len(got):]) or not before
            assert (await _page(q, status, None, cursor, 4))["has_next"]
        await a.stop()

    run(go())


def test_paging_backwards_after_a_redrive_by_id_and_a_merge(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, **DEAD_SPILLS)
        q = await _queue(a)
        forwards = await _forwards(q, DEAD, 6)
        taken = forwards[7]
        assert await a.redrive("q", [f"j{taken:010d}"]) == 1
        monkeypatch.setattr(spill_compaction, "COMPACT_REFS", 3)
        writer = a._queues["q"].target.spills
        await a.push("q", [NewJob(b'{"x":1}', priority=-1)])  # (starts the merge)
        await until(lambda: writer.ready is not None or writer.compactions > 0)
        await a.push("q", [NewJob(b'{"x":2}', priority=-1)])  # (lands it)
        assert len(stored(store).spill_refs) < OBJECTS
        want = [s for s in forwards if s != taken]
        assert await _forwards(q, DEAD, 6) == want
        assert await _backwards(q, DEAD, want[-1] + 1, 6) == want
        await a.stop()

    run(go())


def test_a_page_backwards_over_a_missing_spill_object_fails_naming_it(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, **DEAD_SPILLS)
        q = await _queue(a)
        refs = stored(store).spill_refs
        gone = max(refs, key=lambda ref: ref.seqs[1])  # (the one a page back reads first)
        store.delete(gone.key)
        before = store.read(paths.state_key("q")).data
        with pytest.raises(SegmentMissing, match=gone.key):
            await _page(q, DEAD, None, gone.seqs[1] + 1, 5)
        assert store.read(paths.state_key("q")).data == before
        await a.stop()

    run(go())
