"""The group-commit loop in-process, with faults injected into a real file store."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.commit.loop import CommitLoop
from broker.errors import InvalidRequest, OsqueueError, StorageUnavailable
from broker.model.format.decode import decode_state
from broker.model.ops import NewJob, Push
from broker.service.broker import Broker
from broker.service.config import BrokerConfig
from broker.storage import FileStore, MemoryStore
from tests.support.commit_targets import Tally
from tests.support.direct import DirectQueue


class FaultyStore(FileStore):
    """An injected fault: chosen conditional writes fail, before or after landing."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.fail_after_landing: set[int] = set()
        self.fail_before_landing: set[int] = set()
        self.writes = 0
        self.injected = 0
        self.lock = threading.Lock()

    def write_if_match(self, key: str, data: bytes, etag: str) -> str:
        with self.lock:
            self.writes += 1
            n = self.writes
        if n in self.fail_before_landing:
            self.injected += 1
            raise StorageUnavailable("injected: timed out before the write")
        etag = super().write_if_match(key, data, etag)
        if n in self.fail_after_landing:
            self.injected += 1
            raise StorageUnavailable("injected: timed out after the write landed")
        return etag


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def new_broker(store: FileStore) -> Broker:
    return Broker(store, BrokerConfig(url="http://in-process", self_test=False))


def test_batches_concurrent_ops_into_few_writes(tmp_path: Path) -> None:
    store = FaultyStore(tmp_path)

    async def main() -> tuple[list[list[str]], int]:
        broker = new_broker(store)
        await broker.start()
        await broker.push("q", [NewJob(b"0")])
        before = store.writes
        ids = await asyncio.gather(*(broker.push("q", [NewJob(str(i).encode())])
                                     for i in range(200)))
        writes = store.writes - before
        await broker.stop()
        return ids, writes

    ids, writes = run(main())
    assert len({i[0] for i in ids}) == 200
    assert writes < 20  # 200 callers, a handful of group commits
    assert len(decode_state(store.read(paths.state_key("q")).data).jobs) == 201


@pytest.mark.parametrize("where", ["after", "before"])
def test_unknown_outcome_is_resolved_without_duplicates(tmp_path: Path, where: str) -> None:
    store = FaultyStore(tmp_path)
    (store.fail_after_landing if where == "after" else store.fail_before_landing).update({3, 4, 7})

    async def main() -> list[str]:
        broker = new_broker(store)
        await broker.start()
        out = []
        for i in range(10):
            out += await broker.push("q", [NewJob(orjson.dumps(i))])
        await broker.stop()
        return out

    ids = run(main())
    assert store.injected == 3
    state = decode_state(store.read(paths.state_key("q")).data)
    assert sorted(ids) == sorted(j.id for j in state.jobs.values()) and len(ids) == 10
    jobs = [state.job(i) for i in ids]
    assert [orjson.loads(j.payload) if j else None for j in jobs] == list(range(10))


def test_foreign_write_with_our_record_is_reapplied(tmp_path: Path) -> None:
    """Someone else writes the object (an admin tool) while we own it: we re-read, re-apply."""
    store = FileStore(tmp_path)

    async def main() -> None:
        broker = new_broker(store)
        await broker.start()
        await broker.push("q", [NewJob(b"1")])
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: DirectQueue(store, "q").apply(
                Push((NewJob(b"2"),))))
        await broker.push("q", [NewJob(b"3")])
        stats = await broker.stats("q")
        assert stats["total"] == 3 and stats["conflicts"] == 1
        await broker.stop()

    run(main())
    state = decode_state(store.read(paths.state_key("q")).data)
    assert sorted(orjson.loads(j.payload) for j in state.jobs.values()) == [1, 2, 3]


def test_step_down_answers_not_the_broker(tmp_path: Path) -> None:
    """A broker whose queue was taken over (its lease lapsed, as another broker
    saw it) answers NotTheBroker with the new owner's URL at its next write."""
    from broker.errors import NotTheBroker
    from tests.support.faults import Clock

    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        a = Broker(store, BrokerConfig(url="http://a", self_test=False))
        await a.start()
        await a.push("q", [NewJob(b"1")])
        b = Broker(store, BrokerConfig(url="http://b", self_test=False),
                   clock=clock.now_ms, monotonic=clock.monotonic)
        await b.start()
        with pytest.raises(NotTheBroker) as info:  # a is alive: b does not steal the queue
            await b.push("q", [NewJob(b"2")])
        assert info.value.details["url"] == "http://a"
        clock.advance(31)  # b saw no change for a whole lease (a was paused, say)
        await b.watch()
        await b.push("q", [NewJob(b"2")])
        with pytest.raises(NotTheBroker) as info:
            await a.push("q", [NewJob(b"3")])
        assert info.value.details["url"] == "http://b"
        assert (await b.stats("q"))["total"] == 2
        await a.stop()
        await b.stop()

    run(main())


def test_direct_queue_archives_and_survives_races(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    q = DirectQueue(store, "d")

    def work(n: int) -> None:
        DirectQueue(store, "d").apply(Push(
            tuple(NewJob(orjson.dumps([n, i])) for i in range(5))))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert q.stats()["total"] == 30


def test_a_caller_gets_its_result_or_the_error_raised() -> None:
    """The loop is generic over state, ops and results, and answers failures as
    exceptions: raised by the target (nothing written), returned by it as an
    op's outcome (raised once the write carrying it landed), or a bug (that
    call alone fails; the others of its batch are applied)."""
    store = MemoryStore()

    async def main() -> None:
        executor = ThreadPoolExecutor(2)
        loop: CommitLoop[dict[str, Any], int | str, int] = CommitLoop(
            store, "t/tally.json", Tally(), "w", executor, clock=lambda: 0)
        await loop.load()
        loop.reactivate()
        loop.start()
        assert await loop.submit(2) == 2
        seq = orjson.loads(store.get("t/tally.json"))["seq"]
        with pytest.raises(InvalidRequest, match="nothing written"):
            await loop.submit("refuse")
        assert orjson.loads(store.get("t/tally.json"))["seq"] == seq
        with pytest.raises(InvalidRequest, match="refusal written"):
            await loop.submit("refuse-written")
        assert orjson.loads(store.get("t/tally.json"))["notes"] == 1
        got = await asyncio.gather(loop.submit(1), loop.submit("bug"), loop.submit(3),
                                   return_exceptions=True)
        assert got[0] == 3 and got[2] == 6
        assert isinstance(got[1], OsqueueError) and "ZeroDivisionError" in got[1].message
        assert orjson.loads(store.get("t/tally.json"))["total"] == 6
        await loop.close(5)
        executor.shutdown()

    run(main())


def test_a_refused_prepare_rereads_once_then_answers_the_batch() -> None:
    """CommitTarget.prepare refusing a batch: the loop re-reads the object once (its
    state may be behind one that no longer needs it) and tries again; a second
    refusal is the batch's answer, and nothing is written."""
    store = MemoryStore()
    target = Tally()

    async def main() -> None:
        executor = ThreadPoolExecutor(2)
        loop: CommitLoop[dict[str, Any], int | str, int] = CommitLoop(
            store, "t/tally.json", target, "w", executor, clock=lambda: 0)
        await loop.load()
        loop.reactivate()
        loop.start()
        assert await loop.submit(2) == 2
        before = store.get("t/tally.json")
        target.refusals, target.prepared = 1, 0
        assert await loop.submit(3) == 5 and target.prepared == 2  # refused, re-read, applied
        target.refusals = 2
        with pytest.raises(StorageUnavailable, match="cannot be read"):
            await loop.submit(4)
        assert orjson.loads(store.get("t/tally.json"))["total"] == 5
        assert store.get("t/tally.json") != before  # (the 3 landed; the 4 did not)
        await loop.close(5)
        executor.shutdown()

    run(main())
