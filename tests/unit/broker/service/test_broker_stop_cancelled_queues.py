"""broker.service.broker.Broker.stop cancelled at successive turns of the event
loop while three queues are in different states (advfinal): one with a push's
head write in flight, one idle with a job pending, one being admitted by a push
(its object read in flight). A successor then takes everything over: every
acknowledged job is there once, an unknown push at most once, and no loop of
the stopped broker runs on."""

from __future__ import annotations

import asyncio
import threading

import pytest

from broker.errors import OsqueueError, OutcomeUnknown
from broker.model.ops import NewJob
from broker.storage import MemoryStore
from tests.support.faults import Clock, FaultyStore
from tests.support.inprocess import crash, run, started, stored, successor


def payloads(store: MemoryStore, queue: str) -> list[bytes]:
    return sorted(j.payload for j in stored(store, queue).jobs.values())


@pytest.mark.parametrize("release_first", [True, False])
# (turns 0: stop() is cancelled before it first runs, so it never began: its loops
# are the caller's to end, as if stop() had not been called)
@pytest.mark.parametrize("turns", [1, 2, 3, 4, 5, 8, 13, 21])
def test_stop_cancelled_with_queues_mid_commit_idle_and_admitted(
        turns: int, release_first: bool) -> None:
    inner = MemoryStore()
    store = FaultyStore(inner)
    clock = Clock()
    write_gate, read_gate = threading.Event(), threading.Event()
    in_write, in_read = threading.Event(), threading.Event()

    def held(entered: threading.Event, gate: threading.Event):  # type: ignore[no-untyped-def]
        def hook(_key: str) -> None:
            entered.set()
            gate.wait(10)
        return hook

    async def main() -> dict[str, object]:
        a = await started(store, clock=clock)
        await a.push("q1", [NewJob(b'"q1-a"')])
        await a.push("q2", [NewJob(b'"q2-a"')])
        z = await started(store, "http://z", clock=clock)  # q3: made and left by z
        await z.push("q3", [NewJob(b'"q3-a"')])
        await z.stop(drain_s=5)
        store.inject("write_if_match", None, key_contains="q1/queue.json",
                     before=held(in_write, write_gate))
        store.inject("read", None, key_contains="q3/queue.json",
                     before=held(in_read, read_gate))
        loop = asyncio.get_running_loop()
        p1 = asyncio.ensure_future(a.push("q1", [NewJob(b'"q1-b"')]))
        p3 = asyncio.ensure_future(a.push("q3", [NewJob(b'"q3-b"')]))
        await loop.run_in_executor(None, in_write.wait, 10)
        await loop.run_in_executor(None, in_read.wait, 10)
        stopping = asyncio.create_task(a.stop(drain_s=10))
        if release_first:
            write_gate.set()
            read_gate.set()
        for _ in range(turns):
            await asyncio.sleep(0)
        stopping.cancel()
        write_gate.set()
        read_gate.set()
        await asyncio.wait({stopping}, timeout=20)
        answers: dict[str, object] = {}
        for name, p in (("q1", p1), ("q3", p3)):
            await asyncio.wait({p}, timeout=20)
            assert p.done(), f"the push to {name} was never answered"
            answers[name] = p.exception() or p.result()
        for name, q in a._queues.items():
            if q.loop._task is not None:
                await asyncio.wait({q.loop._task}, timeout=5)
                assert q.loop._task.done(), f"{name}'s loop runs on after stop() cancelled"
        await crash(a)
        a._executor.shutdown()
        b = await successor(inner, clock)
        for name in ("q1", "q2", "q3"):
            await b.push(name, [NewJob(f'"{name}-after"'.encode())])
        await b.stop(drain_s=5)
        return answers

    answers = run(main())
    assert payloads(inner, "q2") == [b'"q2-a"', b'"q2-after"']
    for name in ("q1", "q3"):
        got = answers[name]
        have = payloads(inner, name)
        assert have.count(f'"{name}-a"'.encode()) == 1
        assert have.count(f'"{name}-after"'.encode()) == 1
        copies = have.count(f'"{name}-b"'.encode())
        if isinstance(got, OutcomeUnknown):
            assert copies <= 1, (name, have)
        elif isinstance(got, OsqueueError):
            assert copies == 0, (name, got, have)  # (an error that says nothing landed)
        else:
            assert copies == 1, (name, got, have)
