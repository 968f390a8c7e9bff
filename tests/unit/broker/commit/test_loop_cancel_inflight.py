"""The commit loop's task cancelled at each of its awaits (broker/commit/loop.py):
what its callers are answered, and what the store holds afterwards.

A write already handed to the executor's thread goes on after the task is
cancelled and may land: its callers must then be answered ``OutcomeUnknown``
(a retry may find it landed), never ``BrokerUnavailable`` (which says nothing
was written). Callers whose ops were never written are answered
``BrokerUnavailable``, and nothing of theirs lands later. Every caller is
answered: none is left waiting."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from broker.commit.loop import CommitLoop
from broker.errors import BrokerUnavailable, OutcomeUnknown
from broker.storage import MemoryStore
from tests.support.commit_targets import Tally
from tests.support.faults import NOT_LANDED, FaultyStore
from tests.support.inprocess import run, until

KEY = "t/tally.json"

Loop = CommitLoop[dict[str, Any], int | str, int]


def _total(store: FaultyStore) -> int:
    return int(orjson.loads(store.get(KEY))["total"])


async def _started(store: FaultyStore, executor: ThreadPoolExecutor, **kw: Any) -> Loop:
    loop: Loop = CommitLoop(store, KEY, Tally(), "w", executor, clock=lambda: 0, **kw)
    await loop.load()
    loop.reactivate()
    loop.start()
    assert await loop.submit(2) == 2
    return loop


def _gate(store: FaultyStore, method: str) -> tuple[threading.Event, threading.Event]:
    """The next ``method`` call blocks in its thread until released: (entered, release)."""
    entered, release = threading.Event(), threading.Event()

    def hold(_key: str) -> None:
        entered.set()
        assert release.wait(10)

    store.inject(method, None, key_contains=KEY, before=hold)
    return entered, release


@pytest.mark.parametrize("how", ["cancel", "close"])
def test_a_write_in_flight_when_the_loop_is_cancelled_is_answered_unknown(how: str) -> None:
    store = FaultyStore(MemoryStore())

    async def main() -> None:
        executor = ThreadPoolExecutor(2)
        loop = await _started(store, executor)
        entered, release = _gate(store, "write_if_match")
        call = asyncio.ensure_future(loop.submit(3))
        await until(entered.is_set)  # (the write is in its thread)
        later = asyncio.ensure_future(loop.submit(4))  # (buffered behind it)
        await asyncio.sleep(0)
        task = loop._task
        assert task is not None
        if how == "cancel":
            task.cancel()
            await asyncio.wait({task}, timeout=5)
        else:
            await loop.close(0.05)  # (the flush times out: cancelled)
        release.set()  # (the write lands after all)
        got = await asyncio.gather(call, later, return_exceptions=True)
        executor.shutdown(wait=True)
        assert _total(store) == 5  # (the 3 landed, the 4 never written)
        assert isinstance(got[0], OutcomeUnknown), got[0]
        assert type(got[1]) is BrokerUnavailable, got[1]
        with pytest.raises(BrokerUnavailable):
            await loop.submit(1)
        assert _total(store) == 5

    run(main())


def test_a_loop_cancelled_in_its_backoff_after_a_failed_write_answers_unknown() -> None:
    store = FaultyStore(MemoryStore())

    async def main() -> None:
        executor = ThreadPoolExecutor(2)
        loop = await _started(store, executor)
        entered, release = _gate(store, "read")  # (the re-read after the failed write)
        store.inject("write_if_match", NOT_LANDED, key_contains=KEY)
        call = asyncio.ensure_future(loop.submit(3))
        await until(entered.is_set)
        task = loop._task
        assert task is not None
        task.cancel()
        task.cancel()  # (repeated)
        release.set()
        await asyncio.wait({task}, timeout=5)
        [got] = await asyncio.gather(call, return_exceptions=True)
        executor.shutdown(wait=True)
        # (an attempt was made: it did not land here, but the loop cannot know)
        assert isinstance(got, OutcomeUnknown), got
        assert (task.cancelled(), _total(store)) == (True, 2)

    run(main())


@pytest.mark.parametrize("where", ["read", "linger"])
def test_a_loop_cancelled_before_any_write_answers_unavailable_and_writes_nothing(
        where: str) -> None:
    store = FaultyStore(MemoryStore())

    async def main() -> None:
        executor = ThreadPoolExecutor(2)
        loop = await _started(store, executor, max_linger_s=30.0, linger_fraction=1e6)
        if where == "read":
            loop._drop_state()  # (as after a fault: the next batch re-reads first)
            entered, release = _gate(store, "read")
            calls = [asyncio.ensure_future(loop.submit(3))]
            await until(entered.is_set)
        else:
            # (the last batch was 3 ops: a batch of 1 lingers for the others)
            loop.stats.last_batch = 3
            loop.stats.last_commit_s = 1.0
            calls = [asyncio.ensure_future(loop.submit(3))]
            await asyncio.sleep(0.05)
            assert not calls[0].done()
            release = threading.Event()
        task = loop._task
        assert task is not None
        task.cancel()
        calls.append(asyncio.ensure_future(loop.submit(4)))  # (in the same turn)
        release.set()
        await asyncio.wait({task}, timeout=5)
        got = await asyncio.gather(*calls, return_exceptions=True)
        executor.shutdown(wait=True)
        assert [type(g) for g in got] == [BrokerUnavailable] * 2, got
        assert (task.cancelled(), _total(store)) == (True, 2)

    run(main())


def test_a_loop_cancelled_before_its_task_first_runs_answers_its_callers() -> None:
    store = FaultyStore(MemoryStore())

    async def main() -> None:
        executor = ThreadPoolExecutor(2)
        loop: Loop = CommitLoop(store, KEY, Tally(), "w", executor, clock=lambda: 0)
        await loop.load()
        loop.reactivate()
        call = asyncio.ensure_future(loop.submit(3))
        await asyncio.sleep(0)  # (buffered: no task yet)
        loop.start()
        task = loop._task
        assert task is not None
        task.cancel()  # (before its first step: as crash() in the turn a loop starts)
        await asyncio.wait({task}, timeout=5)
        done, _ = await asyncio.wait({call}, timeout=1)
        call.cancel()
        executor.shutdown(wait=True)
        assert store.calls.get("create_if_absent", 0) == 0  # (nothing written)
        assert call in done, "the caller is left waiting for ever"

    run(main())
