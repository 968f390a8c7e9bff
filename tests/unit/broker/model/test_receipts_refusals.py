"""Refusal receipts (broker/model/receipts.py) through brokers: a keyed push refused as
QueueFull ("nothing from this push was written") stays refused for every later
attempt of that call, across a takeover and through failed writes, and a
refusal nobody was told is not replayed. The producer's own re-push after the
refusal is then the only copy of its job."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from broker.errors import QueueFull
from broker.model.ops import NewJob
from broker.storage import FileStore
from tests.support.faults import LATE, NOT_LANDED, REFUSED, Clock, FaultyStore
from tests.support.inprocess import run, started, stored, until
from tests.support.pause import SkippedPause

#: client ids as QueueClient draws them; their calls are keyed f"{CLIENT}-{n}"
CLIENT = "r-0123456789ab"
OTHER_CLIENT = "r-ba9876543210"
ORDER = b'"order-42"'


def test_late_copy_of_a_push_refused_as_queue_full_is_not_applied(tmp_path: Path) -> None:
    """A keyed push refused as QueueFull by the owner, while its first attempt is
    held by a standby (slow to read the object), is not applied when that attempt
    arrives after the queue drained and the standby took over: it replays the
    refusal. The producer, told nothing was written, pushes again: the order is
    in the queue once. A refusal once left no receipt, so the late attempt was
    applied and the re-push made two."""
    inner = FileStore(tmp_path)
    store_a = FaultyStore(inner)

    async def main() -> None:
        b = await started(inner, "http://b")  # the owner
        await b.create_queue("q", {"max_state_bytes": 65_536})
        await b.push("q", [NewJob(b'"' + b"f" * 60_000 + b'"')])  # the queue is full
        a = await started(store_a, "http://a")  # a standby on the same store
        gate, entered = threading.Event(), threading.Event()

        def hold(_key: str) -> None:
            entered.set()
            gate.wait(20)

        store_a.inject("read", None, key_contains="q/queue.json", before=hold)
        big = NewJob(b'"' + b"o" * 10_000 + b'"')  # an order with a 10 KB payload
        order = NewJob(ORDER)
        # attempt 1 of the producer's call 0 reaches standby a, slow to read the object
        late = asyncio.create_task(a.push("q", [order, big], request=f"{CLIENT}-0", floor=0))
        await until(entered.is_set)
        # the client times out, is redirected to b: attempt 2 is refused, queue full
        with pytest.raises(QueueFull):
            await b.push("q", [order, big], request=f"{CLIENT}-0", floor=0)
        await b.purge("q")  # the queue drains (an admin purge of the filler here)
        await b.stop(drain_s=5)  # rolling restart of the owner
        gate.set()
        with pytest.raises(QueueFull, match="refused before"):
            await late  # attempt 1 replays the refusal: it is not applied
        # the producer, told "queue full, nothing written", pushes the order again
        await a.push("q", [order, big], request=f"{CLIENT}-1", floor=1)
        await a.stop(drain_s=5)

    run(main())
    copies = [j.id for j in stored(inner).jobs.values() if j.payload == ORDER]
    assert len(copies) == 1, (
        f"the producer was told QueueFull ('nothing from this push was written') for call 0 "
        f"and pushed once more; the queue holds the order {len(copies)} times: {copies}")


@pytest.mark.parametrize("kind", [NOT_LANDED, REFUSED])
def test_refusal_receipt_survives_a_failed_write_on_a_live_owner(
        tmp_path: Path, kind: str) -> None:
    """A keyed push refused as QueueFull keeps its refusal's receipt through a failed
    write on the live owner (the purge that makes room fails once: not landed, or
    refused): the push's late attempt is not applied, and the producer's re-push
    leaves the order in the queue once."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    order = NewJob(b'"order-42"')
    big = NewJob(b'"' + b"o" * 10_000 + b'"')

    async def main() -> None:
        b = await started(store, "http://b")
        await b.create_queue("q", {"max_state_bytes": 65_536})
        await b.push("q", [NewJob(b'"' + b"f" * 60_000 + b'"')])  # full
        # attempt 2 of the producer's call 0 (attempt 1 held in the network): refused
        with pytest.raises(QueueFull):
            await b.push("q", [order, big], request=f"{CLIENT}-0", floor=0)
        # the admin purges the filler; the first PUT of that purge fails transiently
        store.inject("write_if_match", kind, key_contains="q/queue.json")
        try:
            await b.purge("q")
        except Exception:
            await b.purge("q")
        # attempt 1 of call 0 arrives now (queue has room)
        try:
            await b.push("q", [order, big], request=f"{CLIENT}-0", floor=0)
        except QueueFull:
            pass
        # the producer, told QueueFull ("nothing written"), pushes the order again
        await b.push("q", [order, big], request=f"{CLIENT}-1", floor=1)
        await b.stop(drain_s=5)

    run(main())
    copies = [j.id for j in stored(inner).jobs.values() if j.payload == b'"order-42"']
    assert len(copies) == 1, (
        f"[{kind}] the producer was told QueueFull for call 0 and pushed once more; the "
        f"queue holds the order {len(copies)} times: {copies} (live owner, no crash)")


def test_a_refusal_nobody_was_told_is_not_replayed_to_a_retry(tmp_path: Path) -> None:
    """A refusal nobody was told (the push's batch was answered OutcomeUnknown) is not
    replayed to a retry of that push: the order pushed once by its producer is
    stored once, even as the push's first PUT lands late.

    Once the refusal, carried over from the dropped state, answered the retry
    QueueFull from memory, without a write and with room in the queue, while the
    push's first attempt was still in flight; it landed afterwards, and the
    producer, told nothing was written, pushed again."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock()
    order = NewJob(b'"order-42"')
    big = NewJob(b'"' + b"o" * 10_000 + b'"')
    filler = NewJob(b'"' + b"f" * 56_000 + b'"')
    log: list[str] = []

    async def attempt(coro: object) -> str:
        try:
            return repr(await coro)  # type: ignore[misc]
        except Exception as exc:
            return type(exc).__name__

    async def main() -> None:
        a = await started(store, "http://a", clock, commit_timeout_s=0.4,
                          pause=SkippedPause())  # (the failing batch's backoff skipped)
        await a.create_queue("q", {"max_state_bytes": 65_536})
        # 1. producer CLIENT's push (call 0): its first PUT is held in the network (it
        #    lands later); every other write fails until the batch gives up.
        store.inject("write_if_match", LATE, key_contains="q/queue.json")
        store.inject("write_if_match", NOT_LANDED, times=None, key_contains="q/queue.json")
        r1 = await attempt(a.push("q", [order, big], request=f"{CLIENT}-0", floor=0))
        log.append(f"call0 attempt1: {r1}")
        assert r1 == "OutcomeUnknown"
        # 2. CLIENT retries call 0 (OutcomeUnknown is retryable); OTHER_CLIENT's big push
        #    joins the same batch first. Storage still failing: OutcomeUnknown to both.
        r2 = await asyncio.gather(
            attempt(a.push("q", [filler], request=f"{OTHER_CLIENT}-0", floor=0)),
            attempt(a.push("q", [order, big], request=f"{CLIENT}-0", floor=0)))
        log.append(f"batch2 (other filler, call0 retry): {r2}")
        assert r2 == ["OutcomeUnknown", "OutcomeUnknown"]
        store.heal()
        # (OTHER_CLIENT gives up; nothing of batch 2 ever landed: queue still has room)
        # 3. CLIENT retries call 0 once more
        r3 = await attempt(a.push("q", [order, big], request=f"{CLIENT}-0", floor=0))
        log.append(f"call0 attempt3: {r3}")
        # 4. the held first PUT of call 0 arrives
        landed = store.land_late()
        log.append(f"late PUTs: {landed}")
        # 5. told QueueFull ("nothing from it was written"), CLIENT pushes the order again
        if r3 == "QueueFull":
            r5 = await attempt(a.push("q", [order, big], request=f"{CLIENT}-1", floor=1))
            log.append(f"call1: {r5}")
        await a.stop(drain_s=5)

    run(main())
    st = stored(inner)
    copies = [j.id for j in st.jobs.values() if j.payload == b'"order-42"']
    assert len(copies) == 1, (
        f"order pushed once by its producer, stored {len(copies)} times {copies}; "
        f"steps: {log}; approx bytes {st.size_estimate()}")
