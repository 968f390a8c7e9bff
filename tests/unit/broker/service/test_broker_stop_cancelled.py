"""broker.service.broker.Broker.stop cancelled in the same turn of the event loop
as one of its waits is answered (the broker record cleared, the store settled):
it ends cancelled and does nothing more.

On Python 3.11 ``asyncio.wait_for`` swallowed such a cancellation: stop() went
on as if never cancelled (closed the queue's loop, shut its executor down and
returned normally). The store afterwards: the record cleared by the commit that
was answered, the pushed job still pending, nothing else written."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from broker.model import state as S
from broker.model.ops import ClearBroker, NewJob
from broker.storage import MemoryStore
from tests.support.inprocess import crash, run, started, stored
from tests.support.same_turn import cancelled_as_answered


def test_stop_cancelled_as_its_broker_record_is_cleared_ends_and_closes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()

    async def go() -> None:
        a = await started(store)
        [job] = await a.push("q", [NewJob(b'"kept"')])
        q = a.served("q")
        assert q is not None
        submit, close = q.loop.submit, q.loop.close
        stopping: list[asyncio.Task[None]] = []
        closed: list[str] = []

        def clear_cancelling(op: Any) -> Awaitable[Any]:
            if isinstance(op, ClearBroker):  # (answered, and stop() cancelled, in one turn)
                return cancelled_as_answered(submit(op), stopping[0])
            return submit(op)

        async def recorded_close(timeout_s: float | None = None) -> None:
            closed.append(q.name)
            await close(timeout_s)

        monkeypatch.setattr(q.loop, "submit", clear_cancelling)
        monkeypatch.setattr(q.loop, "close", recorded_close)
        stopping.append(asyncio.create_task(a.stop(drain_s=10)))
        await asyncio.wait(stopping, timeout=20)
        task, = stopping
        assert (task.done() and task.cancelled(), closed) == (True, [])
        state = stored(store)
        assert state.broker is None  # (the commit that answered it landed)
        assert [j.id for j in state.jobs.values() if j.status == S.PENDING] == [job]
        await crash(a)  # (its loop, left running by the cancelled stop)
        a._executor.shutdown()

    run(go(), timeout_s=60)


def test_stop_cancelled_as_the_store_settles_ends_cancelled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()

    async def go() -> None:
        a = await started(store)
        [job] = await a.push("q", [NewJob(b'"kept"')])
        io = a._io
        stopping: list[asyncio.Task[None]] = []

        def settle_cancelling(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
            if fn == store.settle:  # (settled, and stop() cancelled, in one turn)
                return cancelled_as_answered(io(fn, *args), stopping[0])
            return io(fn, *args)

        monkeypatch.setattr(a, "_io", settle_cancelling)
        stopping.append(asyncio.create_task(a.stop(drain_s=10)))
        await asyncio.wait(stopping, timeout=20)
        task, = stopping
        assert task.done() and task.cancelled()  # (not returned as if stopped)
        state = stored(store)
        assert state.broker is None
        assert [j.id for j in state.jobs.values() if j.status == S.PENDING] == [job]
        a._executor.shutdown()

    run(go(), timeout_s=60)
