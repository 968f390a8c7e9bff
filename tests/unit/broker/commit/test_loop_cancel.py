"""The commit loop's task cancelled (broker/commit/loop.py): it ends, whatever woke
it in the same turn of the event loop, and writes nothing more.

On Python 3.11 ``asyncio.wait_for`` swallows a cancellation that arrives as the
awaited thing completes: a loop waiting for work with ``wait_for`` and woken
(an op submitted, a poke) just as its task was cancelled went on running,
cancelled, and wrote on: a crashed broker's loop in the tests (its in-flight
batch applied, later timer commits spilling jobs into objects no head
references, written after the successor's sweep), a stopped one's in a broker
closing after its flush timeout."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from broker.commit.loop import CommitLoop
from broker.storage import MemoryStore
from tests.support.commit_targets import Tally
from tests.support.inprocess import run
from tests.support.parked import ParkedEvent

KEY = "t/tally.json"


class Timed(Tally):
    """A tally with a timer always an hour away (as a queue's broker record renewal
    is): the loop waits for work with a timeout."""

    def next_timer_ms(self, state: dict[str, Any], now_ms: int) -> int | None:
        return now_ms + 3_600_000


@pytest.mark.parametrize("wake", ["submit", "poke"])
def test_a_loop_cancelled_as_it_is_woken_ends_and_writes_nothing_more(wake: str) -> None:
    store = MemoryStore()

    async def main() -> None:
        executor = ThreadPoolExecutor(2)
        loop: CommitLoop[dict[str, Any], int | str, int] = CommitLoop(
            store, KEY, Timed(), "w", executor, clock=lambda: 0)
        loop._wake = wake = ParkedEvent()  # (says when the loop waits for work)
        await loop.load()
        loop.reactivate()
        loop.start()
        assert await loop.submit(2) == 2
        # (idle: waiting for work, its timer an hour away)
        await wake.waiting.wait()
        task = loop._task
        assert task is not None
        late = asyncio.ensure_future(loop.submit(3)) if wake == "submit" else None
        if late is None:
            loop.poke()
        else:
            await asyncio.sleep(0)  # (the submit ran: buffered, the loop woken)
        task.cancel()  # (as a crash does: in the same turn as the wake)
        await asyncio.wait({task}, timeout=5)
        total = orjson.loads(store.get(KEY))["total"]
        assert (task.cancelled(), total) == (True, 2)  # (ended; the 3 not written)
        if late is not None:
            late.cancel()
        executor.shutdown()

    run(main())


def test_abort_ends_the_loop_at_once_answering_what_it_buffered_unwritten() -> None:
    """CommitLoop.abort (a cancelled shutdown's way to stop a loop): the op
    buffered behind the write in flight is answered ``BrokerUnavailable`` and
    never written; later submits are refused; the loop's task ends."""
    from broker.errors import BrokerUnavailable, OsqueueError

    store = MemoryStore()

    async def main() -> None:
        executor = ThreadPoolExecutor(2)
        loop: CommitLoop[dict[str, Any], int | str, int] = CommitLoop(
            store, KEY, Timed(), "w", executor, clock=lambda: 0)
        loop._wake = wake = ParkedEvent()
        await loop.load()
        loop.reactivate()
        loop.start()
        assert await loop.submit(2) == 2
        await wake.waiting.wait()  # (idle)
        late = asyncio.ensure_future(loop.submit(3))
        await asyncio.sleep(0)  # (the submit ran: buffered, the loop woken, not yet run)
        loop.abort()
        task = loop._task
        assert task is not None
        await asyncio.wait({task, late}, timeout=5)
        assert task.cancelled()
        assert isinstance(late.exception(), BrokerUnavailable)
        with pytest.raises(OsqueueError):
            await loop.submit(4)
        assert orjson.loads(store.get(KEY))["total"] == 2  # (neither 3 nor 4 written)
        executor.shutdown()

    run(main())
