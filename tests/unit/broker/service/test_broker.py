"""The broker service (broker/service/broker.py) in-process: one commit loop per queue
whatever the order of a watch round and a caller's first read, reads that show
committed jobs only, and operations on a queue that does not exist creating
nothing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from broker import paths
from broker.errors import NotFound, PayloadTooLarge, StorageRefused, UnknownQueue
from broker.model.ops import NewJob
from broker.storage import FileStore
from tests.support.faults import REFUSED, Clock, FaultyStore
from tests.support.inprocess import crash, run, started, stored, until
from tests.support.parked import ParkedLock


def test_one_loop_per_queue_and_stop_ends_it(tmp_path: Path) -> None:
    """A watch round that takes a queue over while a redirected client's call waits on
    its first read of that queue leaves one commit loop for the queue, and stop()
    ends it.

    Once, the waiting call's stale look-up made a second loop over the one the
    watch had registered: both wrote the object as its owner, and stop() retired
    only the second, the first faulting every 2 s for ever after the executor shut
    down."""
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    gate, entered = threading.Event(), threading.Event()

    def slow_first_read(_key: str) -> None:
        if not entered.is_set():  # the redirected call's read; the watch's goes through
            entered.set()
            gate.wait(10)

    async def main() -> tuple[bool, bool]:
        a = await started(inner, "http://a", clock)
        await a.push("q", [NewJob(b"1")])
        await crash(a)
        b = await started(store, "http://b", clock)
        lock = b._locks["q"] = ParkedLock()  # (b's lock for q: says who queues behind it)
        clock.advance(31)  # a's lease has run out as b sees it
        store.inject("read", None, key_contains="q/queue.json", before=slow_first_read)
        push = asyncio.create_task(b.push("q", [NewJob(b"2")]))  # a redirected client
        await until(entered.is_set)
        watch = asyncio.create_task(b.watch())  # the periodic watch round, meanwhile
        queued = asyncio.ensure_future(lock.waiting.wait())
        await asyncio.wait({watch, queued}, return_when=asyncio.FIRST_COMPLETED)
        queued.cancel()  # (done, or queued behind the call)
        gate.set()
        await watch
        first = b._queues["q"]
        await push
        second = b._queues["q"]
        same = first is second
        await b.stop(drain_s=2)
        orphan_running = first.loop._task is not None and not first.loop._task.done()
        if orphan_running:
            first.loop._task.cancel()
        return same, orphan_running

    same, orphan_running = run(main())
    assert same, "two commit loops own queue q inside one broker"
    assert not orphan_running, "a commit loop of queue q still runs after stop()"


def test_reads_do_not_show_a_push_that_never_committed(tmp_path: Path) -> None:
    """GET /jobs on the owner while a push's write is in flight (and then refused)
    shows only committed jobs: a reader is never shown a job that never existed.
    Reads once came from the commit loop's working state, which holds the batch
    being written."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    gate, entered = threading.Event(), threading.Event()

    def slow(_key: str) -> None:
        entered.set()
        gate.wait(10)

    async def main() -> list[str]:
        a = await started(store)
        await a.push("q", [NewJob(b'"a"')])
        store.inject("write_if_match", REFUSED, key_contains="q/queue.json", before=slow)
        push = asyncio.create_task(a.push("q", [NewJob(b'"phantom"')]))
        await until(entered.is_set)
        reader = asyncio.create_task(a.jobs("q"))  # a reader, meanwhile
        loop = a._queues["q"].loop
        await until(lambda: reader.done() or bool(loop._buffer))  # answered, or queued
        gate.set()
        seen = [j["id"] for j in await reader]
        with pytest.raises(StorageRefused):
            await push
        await a.stop(drain_s=5)
        return seen

    seen = run(main())
    committed = [j.id for j in stored(inner).jobs.values()]
    assert seen == committed, f"GET /jobs showed {seen}; only {committed} were ever committed"


@pytest.mark.parametrize("request_key", [None, "r-0123456789ab-0"])  # None: the control
def test_purge_of_a_queue_that_does_not_exist_creates_nothing(tmp_path: Path,
                                                              request_key: str | None) -> None:
    """A purge of a queue that does not exist, after the first push to it was
    refused, answers UnknownQueue and creates no object, unkeyed (the control) or
    keyed as QueueClient sends it. A keyed purge once wrote its receipt with
    create_if_absent and so brought the queue into being."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, default_settings={"max_payload_bytes": 1024})
        with pytest.raises(PayloadTooLarge):  # the first push of q2 is refused
            await a.push("q2", [b'"' + b"x" * 2000 + b'"'])
        with pytest.raises(UnknownQueue):  # q2 does not exist
            await a.stats("q2")
        with pytest.raises(UnknownQueue):  # and purging it does not make it exist
            await a.purge("q2", None, request=request_key, floor=0)
        await a.stop(drain_s=5)

    run(main())
    with pytest.raises(NotFound):
        store.read(paths.state_key("q2"))  # a purge never brings a queue into being
