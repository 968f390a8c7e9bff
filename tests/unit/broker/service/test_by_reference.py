"""broker.service.by_reference.publish_by_reference: a publish answered as a
duplicate only once its key is in a LANDED head. The queue loop's state is
changed in place while a commit is in flight, so a publish key seen there may
belong to a commit that never lands. Real file store behind a fault
injector; the store is checked afterwards."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from broker import paths
from broker.errors import StorageRefused
from broker.model.format import segment_format
from broker.model.ops import PushPayloads
from broker.storage.files import FileStore
from tests.support.faults import REFUSED, Clock, FaultyStore
from tests.support.inprocess import payloads, run, stage_all, staged_chunks, started, stored

QUEUE_KEY = paths.state_key("q")
ONCE = "write:w-1"


def test_publish_by_reference_ignores_a_publish_key_of_a_commit_still_in_flight(
        tmp_path: Path) -> None:
    """Publish 1's last commit (its references and its key) is in flight when
    publish 2 of the same write (a driver's retry) looks at the loop's state,
    which already holds the key; then that commit is refused and never lands.
    Publish 2 must publish the rows, not answer 0 rows and let the staging
    objects go (the write would be lost: every later retry is a duplicate)."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))
    chunks = staged_chunks(3)

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=100)
        await a.push("q", [b'{"n":-1}'])
        keep = await stage_all(a, "q", chunks)
        loop = a._queues["q"].loop
        events = asyncio.get_running_loop()
        in_flight = asyncio.Event()
        second_submitted = threading.Event()
        submit = loop.submit

        async def watching(op: Any) -> Any:
            if isinstance(op, PushPayloads) and op.once == ONCE and not op.refs:
                second_submitted.set()  # (publish 2's op, before it joins the buffer)
            return await submit(op)

        loop.submit = watching  # type: ignore[method-assign]

        def hold(_key: str) -> None:  # publish 1's last commit, in the store's thread
            events.call_soon_threadsafe(in_flight.set)
            assert second_submitted.wait(10), "publish 2 never reached the loop"

        # the write of publish 1's Reserve is the 1st, that of its references the 2nd
        store.inject("write_if_match", REFUSED, nth=2, key_contains=QUEUE_KEY, before=hold)
        first = asyncio.ensure_future(a.publish("q", "w-1/", keep, once=ONCE))
        await in_flight.wait()
        second = await a.publish("q", "w-1/", keep, once=ONCE)
        with pytest.raises(StorageRefused):
            await first
        assert second == {"published": 300, "discarded": 0, "duplicate": False}
        again = await a.publish("q", "w-1/", keep, once=ONCE)  # the driver's next retry
        assert again["duplicate"]
        assert sorted(p["n"] for p in payloads(store)) == list(range(-1, 300))
        assert sum(r.count for r in stored(store).segment_refs) == 300
        assert store.list("q/staging/") == []
        await a.stop()

    run(go())


def test_push_by_reference_writes_the_max_attempts_of_the_landed_head(tmp_path: Path) -> None:
    """A Configure of max_attempts applies to the loop's state in place while
    its write is in flight, just as a push by reference (its Reserve landed)
    reads the max_attempts its segment's jobs get; that write is then
    refused. The jobs must carry the queue's max_attempts (3), not the one
    that never landed (7): else a job dies or is retried as nobody set."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10)
        await a.push("q", [b'{"n":-1}'])
        loop = a._queues["q"].loop
        events = asyncio.get_running_loop()
        configure_buffered = threading.Event()
        submit = loop.submit
        configured: list[asyncio.Future[Any]] = []

        async def watching(op: Any) -> Any:
            if type(op).__name__ == "Configure":
                configure_buffered.set()
            return await submit(op)

        loop.submit = watching  # type: ignore[method-assign]

        def configure() -> None:
            configured.append(asyncio.ensure_future(a.create_queue("q", {"max_attempts": 7})))

        def hold(_key: str) -> None:  # the Reserve's write, in the store's thread
            events.call_soon_threadsafe(configure)
            assert configure_buffered.wait(10), "the Configure never reached the loop"

        store.inject("write_if_match", None, key_contains=QUEUE_KEY, before=hold)
        store.inject("write_if_match", REFUSED, key_contains=QUEUE_KEY)  # the Configure's
        ids = await a.push("q", [b'{"n":%d}' % i for i in range(20)])
        assert len(ids) == 20
        with pytest.raises(StorageRefused):
            await configured[0]
        head = stored(store)
        assert head.settings.max_attempts == 3
        jobs = [segment_format.segment_job(seq, line, ref) for ref in head.segment_refs
                for seq, line in enumerate(segment_format.segment_lines(
                    store.read(ref.key).data, ref), ref.next_seq)]
        assert len(jobs) == 20 and {job.max_attempts for job in jobs} == {3}
        await a.stop()

    run(go())


def test_push_by_reference_counts_each_job_once_in_enqueued_total(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, segment_push_jobs=10)
        bodies = [b'{"n":%d}' % i for i in range(20)]
        bodies[5] = b'{"n":\n5}'  # (JSON may hold a line break between tokens)
        assert len(await a.push("q", bodies)) == 20
        head = stored(store)
        assert head.segment_refs == [] and len(head.jobs) == 20  # inline, as promised
        assert (await a.stats("q"))["enqueued_total"] == 20
        await a.stop()

    run(go())
