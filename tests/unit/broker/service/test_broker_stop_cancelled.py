"""broker.service.broker.Broker.stop cancelled in the same turn of the event loop
as one of its waits is answered (the broker record cleared, the store settled):
it ends cancelled and does nothing more.

On Python 3.11 ``asyncio.wait_for`` swallowed such a cancellation: stop() went
on as if never cancelled (closed the queue's loop, shut its executor down and
returned normally). Cancelled, it stops the loops it has not closed at once
(``CommitLoop.abort``). The store afterwards: the record cleared by the commit
that was answered, the pushed job still pending, nothing else written."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from broker.errors import BrokerUnavailable
from broker.model import state as S
from broker.model.ops import ClearBroker, NewJob
from broker.service.broker import Broker
from broker.storage import MemoryStore
from tests.support.inprocess import crash, run, started, stored
from tests.support.same_turn import cancelled_as_answered

Patch = Callable[[Broker, "asyncio.Task[None]"], None]


def stop_cancelled(patch: Patch, loop_wait_s: float = 20) -> tuple[bool, MemoryStore, str]:
    """A broker with one job pending stopped, ``patch(broker, stop's task)``
    applied before the task first runs: whether the task ended cancelled, the
    store, the job's id. The queue's commit loop must have ended too (a loop
    left running by a cancelled stop would go on committing: a zombie beside a
    successor); the broker is then ended as a crash would."""
    store = MemoryStore()

    async def go() -> tuple[bool, str]:
        a = await started(store)
        [job] = await a.push("q", [NewJob(b'"kept"')])
        q = a.served("q")
        assert q is not None and q.loop._task is not None
        task = asyncio.create_task(a.stop(drain_s=10))
        patch(a, task)
        await asyncio.wait({task}, timeout=20)
        cancelled = task.done() and task.cancelled()
        await asyncio.wait({q.loop._task}, timeout=loop_wait_s)
        assert q.loop._task.done(), "stop() cancelled left its queue's commit loop running"
        with pytest.raises(BrokerUnavailable):  # (refused, never buffered)
            await a.push("q", [NewJob(b'"after"')])
        await crash(a)
        a._executor.shutdown()
        return cancelled, job

    cancelled, job = run(go(), timeout_s=60)
    return cancelled, store, job


def assert_cleared_and_kept(store: MemoryStore, job: str) -> None:
    state = stored(store)
    assert state.broker is None  # (the commit that answered it landed)
    assert [j.id for j in state.jobs.values() if j.status == S.PENDING] == [job]


def test_stop_cancelled_as_its_broker_record_is_cleared_ends_and_closes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[str] = []

    def patch(a: Broker, stopping: asyncio.Task[None]) -> None:
        q = a.served("q")
        assert q is not None
        submit, close = q.loop.submit, q.loop.close

        def clear_cancelling(op: Any) -> Awaitable[Any]:
            if isinstance(op, ClearBroker):  # (answered, and stop() cancelled, in one turn)
                return cancelled_as_answered(submit(op), stopping)
            return submit(op)

        async def recorded_close(timeout_s: float | None = None) -> None:
            closed.append(q.name)
            await close(timeout_s)

        monkeypatch.setattr(q.loop, "submit", clear_cancelling)
        monkeypatch.setattr(q.loop, "close", recorded_close)

    cancelled, store, job = stop_cancelled(patch)
    assert (cancelled, closed) == (True, [])
    assert_cleared_and_kept(store, job)


def test_stop_cancelled_as_the_store_settles_ends_cancelled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def patch(a: Broker, stopping: asyncio.Task[None]) -> None:
        io, settle = a._io, a.store.settle

        def settle_cancelling(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
            if fn == settle:  # (settled, and stop() cancelled, in one turn)
                return cancelled_as_answered(io(fn, *args), stopping)
            return io(fn, *args)

        monkeypatch.setattr(a, "_io", settle_cancelling)

    cancelled, store, job = stop_cancelled(patch)
    assert cancelled  # (not returned as if stopped)
    assert_cleared_and_kept(store, job)


def test_stop_cancelled_right_after_its_first_step_still_ends_the_loops() -> None:
    """Cancelled before gather's retire tasks first run (they end unstarted, their
    own handler never runs): stop() aborts its queues' loops itself."""
    def patch(a: Broker, stopping: asyncio.Task[None]) -> None:
        # (runs just after stop()'s first step: it has reached gather, whose
        # retire tasks have not run yet)
        asyncio.get_running_loop().call_soon(stopping.cancel)

    cancelled, store, job = stop_cancelled(patch, loop_wait_s=2)  # (2 s: fails fast)
    assert cancelled
    state = stored(store)
    assert [j.id for j in state.jobs.values() if j.status == S.PENDING] == [job]
