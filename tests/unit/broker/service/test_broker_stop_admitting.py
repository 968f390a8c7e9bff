"""broker.service.broker.Broker.stop while a request is admitting a queue this
broker does not serve yet (``_serving``: the queue's lock taken, its object
being read by ``Takeover.admit``): stop() retires the queues it serves when it
starts; the queue the request makes once admitted must not be left with a
commit loop running after stop() returned (a loop nobody closes: never
flushed, its broker record never cleared, committing on beside a successor
while this process lives). Whatever the push was answered, the store agrees:
acknowledged means written once, refused means not written. (_serving once
checked ``_stopping`` only before its awaits: the loop ran on.)"""

from __future__ import annotations

import asyncio

import pytest

from broker.errors import OsqueueError, OutcomeUnknown
from broker.model import state as S
from broker.model.ops import NewJob
from broker.storage import MemoryStore
from tests.support.inprocess import crash, run, started, stored


def test_stop_while_a_push_admits_a_new_queue_leaves_no_loop_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()

    async def go() -> None:
        a = await started(store)
        at_admit, release = asyncio.Event(), asyncio.Event()
        admit = a.takeover.admit

        async def held_admit(name: str) -> bool:
            at_admit.set()
            await release.wait()
            return await admit(name)

        monkeypatch.setattr(a.takeover, "admit", held_admit)
        push = asyncio.ensure_future(a.push("q", [NewJob(b'"x"')]))
        await at_admit.wait()
        stopping = asyncio.create_task(a.stop(drain_s=5))
        await asyncio.sleep(0)  # (stop()'s first step: the queues it retires listed)
        release.set()
        [got] = await asyncio.gather(push, return_exceptions=True)
        await stopping
        running = [name for name, q in a._queues.items()
                   if q.loop._task is not None and not q.loop._task.done()]
        await crash(a)
        a._executor.shutdown()
        if isinstance(got, BaseException):
            assert isinstance(got, OsqueueError), got
            if not isinstance(got, OutcomeUnknown):
                assert store.list("q/") == []  # (refused: nothing written)
        else:
            assert [j.id for j in stored(store).jobs.values()
                    if j.status == S.PENDING] == got
        assert running == [], f"stop() returned with the loops of {running} running"

    run(go(), timeout_s=30)
