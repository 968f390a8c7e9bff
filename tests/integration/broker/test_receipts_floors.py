"""Client floors (broker/model/receipts.py) through brokers: a client's floor, the lowest
of its calls still awaiting an answer, refuses a late copy of any call below it
(one held by a standby or the network while another attempt was answered), and
is not lost by a crash, a takeover, a refused call or a failed write.

Each scenario ends with the store checked: no job made twice, none leased to a
token nobody holds."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from broker.errors import InvalidRequest, PayloadTooLarge, StorageRefused
from broker.model import receipts
from broker.model.ops import CompleteItem, NewJob
from broker.storage import FileStore
from osqueue_spark import QueueClient, start_broker
from tests.support.faults import LATE, NOT_LANDED, REFUSED, Clock, FaultyStore
from tests.support.inprocess import crash, run, started, stored, successor, until

#: a client id as QueueClient draws them; its calls are keyed f"{CLIENT}-{n}"
CLIENT = "r-0123456789ab"


def _hold_first_read(store: FaultyStore) -> tuple[threading.Event, threading.Event]:
    """Hold the next read of the queue object (a standby slow to read it) until the
    first event is set; the second is set once the read is held."""
    gate, entered = threading.Event(), threading.Event()

    def hold(_key: str) -> None:
        entered.set()
        gate.wait(20)

    store.inject("read", None, key_contains="q/queue.json", before=hold)
    return gate, entered


@pytest.mark.parametrize("next_floor", [None, 1])  # None: the control, without a floor
def test_late_attempt_of_an_answered_push_is_not_a_second_job(tmp_path: Path,
                                                              next_floor: int | None) -> None:
    """A push's first attempt is held by a standby (slow to read the object) while
    the client gets its answer from the owner and moves on (its next call's floor
    passes the push); when the owner stops and the standby takes the queue over,
    the late attempt replays the push's receipt (without a floor: the control) or
    is refused as answered before, and never makes a second job.

    The floor once dropped the push's receipt at once, so the late attempt was
    applied as a new call."""
    inner = FileStore(tmp_path)
    store_a = FaultyStore(inner)

    async def main() -> tuple[list[str], list[str]]:
        b = await started(inner, "http://b")  # the owner
        await b.push("q", [NewJob(b'"other"')])
        a = await started(store_a, "http://a")  # a standby on the same store
        gate, entered = _hold_first_read(store_a)
        # attempt 1 of call 0 reaches standby a, which is slow to read the object
        late = asyncio.create_task(a.push("q", [NewJob(b'"order-42"')],
                                          request=f"{CLIENT}-0", floor=0))
        await until(entered.is_set)
        # the client times out, is redirected to b, attempt 2 is answered
        first = list(await b.push("q", [NewJob(b'"order-42"')], request=f"{CLIENT}-0",
                                  floor=0))
        # the client's next call carries floor 1: receipt of call 0 is dropped
        await b.push("q", [NewJob(b'"next"')], request=f"{CLIENT}-1", floor=next_floor)
        await b.stop(drain_s=5)  # rolling restart of the owner
        gate.set()
        if next_floor is None:  # its receipt is still there: the late copy replays it
            second = list(await late)
        else:  # the client had its answer: a late copy is refused, not applied
            with pytest.raises(InvalidRequest, match="answered before"):
                await late
            second = []
        await a.stop(drain_s=5)
        return first, second

    first, second = run(main())
    copies = [j.id for j in stored(inner).jobs.values() if j.payload == b'"order-42"']
    assert copies == first, f"one push, answered {first}, made jobs {copies} (late: {second})"


def test_late_attempt_of_an_answered_claim_does_not_strand_a_job(tmp_path: Path) -> None:
    """The same for a claim: a late copy of a claim the client had its answer for is
    refused and claims nothing, so the other job stays pending rather than leased
    to a token nobody holds (with max_attempts=1 it would die without running)."""
    inner = FileStore(tmp_path)
    store_a = FaultyStore(inner)

    async def main() -> list:
        b = await started(inner, "http://b")
        await b.push("q", [NewJob(b'"j1"', max_attempts=1), NewJob(b'"j2"', max_attempts=1)])
        a = await started(store_a, "http://a")
        gate, entered = _hold_first_read(store_a)
        late = asyncio.create_task(a.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-0", floor=0))
        await until(entered.is_set)
        [got] = await b.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-0", floor=0)
        [done] = await b.complete("q", [CompleteItem(got.token, b"1")])
        assert done.ok
        await b.push("q", [NewJob(b'"x"')], request=f"{CLIENT}-1", floor=1)
        await b.stop(drain_s=5)
        gate.set()
        with pytest.raises(InvalidRequest, match="answered before"):
            await late  # a late copy of an answered claim: refused, claims nothing
        await a.stop(drain_s=5)
        return []

    stray = run(main())
    j2 = stored(inner).job("j0000000002")
    assert j2 is not None
    assert j2.status == "pending", (
        f"j2 is {j2.status} (attempts {j2.attempts}/{j2.max_attempts}) under a lease nobody "
        f"holds ({[s.token for s in stray]}): with max_attempts=1 it dies without running")


@pytest.mark.parametrize("persisted", [True, False])  # False: written by the idle timer
@pytest.mark.parametrize("how", ["crash", "refused_write"])
def test_late_copy_of_an_empty_claim_is_refused(tmp_path: Path, how: str,
                                                persisted: bool) -> None:
    """A worker's claim answered [] and its next claim move its floor past the first;
    after the owner crashes (and a successor takes over) or after a refused write
    on the owner, a late copy of the first claim, arriving once the delayed job is
    due, is refused and the job stays pending, whether the floor was written with
    another push or by the idle queue's timer.

    The floor once lived only in the owner's memory (a claim that found nothing
    wrote nothing, and left no receipt) and was lost with it: the late copy leased
    the job to a token nobody held, and with max_attempts=1 it went dead without
    ever running."""
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> object:
        a = await started(store, "http://a", clock)
        # a job that becomes due in 5 s (a delayed push, or a failed job's backoff)
        await a.push("q", [NewJob(b'"x"', delay_ms=5_000, max_attempts=1)])
        # the worker's claim 0: attempt 1 is held somewhere (a proxy, a standby);
        # attempt 2 reaches the owner and is answered: nothing to do yet
        assert await a.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-0", floor=0) == []
        # the worker's next poll: claim 1, floor 1 (claim 0 has its answer)
        assert await a.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-1", floor=1) == []
        if persisted:  # any other write carries the floor along ...
            await a.push("q", [NewJob(b'"y"', delay_ms=60_000)])
        else:  # ... and on an idle queue a timer writes it within LAZY_WRITE_MS
            clock.advance(receipts.LAZY_WRITE_MS / 1000)
            a._queues["q"].loop.poke()
            await until(lambda: stored(inner).receipts.floors.get(CLIENT, (0, 0))[0] >= 1)
        floors = stored(inner).receipts.floors
        if how == "crash":
            await crash(a)
            owner = await successor(inner, clock)  # 31 s later: x is due
        else:
            store.inject("write_if_match", REFUSED, key_contains="q/queue.json")
            with pytest.raises(StorageRefused):  # e.g. a transient 403 on one PUT
                await a.push("q", [NewJob(b'"z"')])
            clock.advance(6)  # x is due
            owner = a
        # now the held attempt 1 of claim 0 arrives
        try:
            late = await owner.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-0", floor=0)
        except InvalidRequest:
            late = "refused"
        await owner.stop(drain_s=5)
        return late, floors

    late, floors = run(main())
    x = stored(inner).job("j0000000001")
    assert x is not None
    assert late == "refused" and x.status == "pending", (
        f"the late copy of claim 0 (answered [] to the worker) was answered {late!r}; job x "
        f"is now {x.status} under {x.lease.token if x.lease else None}, a lease nobody holds "
        f"(attempts {x.attempts}/{x.max_attempts}); floors in the stored object before: "
        f"{floors}")


def test_floor_of_a_refused_push_survives_a_crash(tmp_path: Path) -> None:
    """A client's floor moved by a keyed push that was refused (PayloadTooLarge) is
    written, so after a crash the late copy of the client's earlier empty claim is
    refused and the delayed job stays pending. A refused call once moved the floor
    in the owner's memory only."""
    clock = Clock()
    inner = FileStore(tmp_path)

    async def main() -> object:
        a = await started(inner, "http://a", clock)
        await a.create_queue("q", {"max_payload_bytes": 1024})
        # a job due in 5 s (a delayed push, a retry backoff), max_attempts=1
        await a.push("q", [NewJob(b'"x"', delay_ms=5_000, max_attempts=1)])
        # worker's call 0: a claim, answered [] (attempt 1 of it is held somewhere)
        assert await a.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-0", floor=0) == []
        # the same client's call 1: a push refused by the queue's payload limit
        with pytest.raises(PayloadTooLarge):
            await a.push("q", [b'"' + b"p" * 2000 + b'"'], request=f"{CLIENT}-1", floor=1)
        clock.advance(receipts.LAZY_WRITE_MS / 1000)  # an idle queue writes the floor soon
        a._queues["q"].loop.poke()
        await until(lambda: stored(inner).receipts.floors.get(CLIENT, (0, 0))[0] >= 1)
        floors = dict(stored(inner).receipts.floors)
        await crash(a)
        b = await successor(inner, clock)  # 31 s later: x is due
        try:
            late = await b.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-0", floor=0)
        except InvalidRequest:
            late = "refused"
        await b.stop(drain_s=5)
        return late, floors

    late, floors = run(main())
    x = stored(inner).job("j0000000001")
    assert x is not None
    assert late == "refused" and x.status == "pending", (
        f"late copy of claim 0 (answered [] long ago; the client's floor had moved to 1 with "
        f"its refused push) was answered {late!r}; job x is {x.status} under "
        f"{x.lease.token if x.lease else None}, a lease nobody holds (attempts "
        f"{x.attempts}/{x.max_attempts}); stored floors before the crash: {floors}")


def test_empty_polls_do_not_rewrite_the_object(tmp_path: Path) -> None:
    """Fifty empty polls (claims that find nothing, each moving the client's floor by
    one) rewrite a queue object of 2,000 delayed jobs at most twice: a moved floor
    is written lazily, not with one whole-object write per poll."""
    store = FileStore(tmp_path)
    server = start_broker(store)
    try:
        client = QueueClient(server.url, "q", timeout_s=20)
        client.push_many([{"payload": {"n": i, "pad": "x" * 20}, "delay_s": 3600}
                          for i in range(2_000)])
        before = stored(store)
        size = len(store.read("q/queue.json").data)
        for _ in range(50):  # an idle poll loop (a stream reader's latestOffset)
            assert client.claim("w1", 1, 30.0) == []
        after = stored(store)
    finally:
        server.stop()
    writes = after.seq - before.seq
    assert writes <= 2, (
        f"50 claims that claimed nothing rewrote the {size}-byte queue object {writes} "
        f"times ({writes * size} bytes written for no job moved)")


@pytest.mark.parametrize("how", ["not_landed", "late", "refused", "timer_not_landed"])
def test_floor_of_empty_poll_survives_a_failed_write_on_a_live_owner(
        tmp_path: Path, how: str) -> None:
    """A client's floor moved by an empty poll, kept for the lazy write, survives a
    failed write on the live owner (another producer's push, or the lazy write
    itself, not landed, late or refused): a late copy of the earlier claim, once
    the job is due, is refused and the job stays pending. The re-read after a
    failed write once gave the stored object, which never had the floor."""
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> object:
        a = await started(store, "http://a", clock)
        await a.push("q", [NewJob(b'"x"', delay_ms=5_000, max_attempts=1)])
        # worker claim 0 answered [] (attempt 1 of it is held in the network)
        assert await a.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-0", floor=0) == []
        # worker's next poll: claim 1, floor 1 -- kept in memory, "written soon"
        assert await a.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-1", floor=1) == []
        if how == "timer_not_landed":
            store.inject("write_if_match", NOT_LANDED, key_contains="q/queue.json")
            seq = stored(inner).seq
            clock.advance(receipts.LAZY_WRITE_MS / 1000)
            a._queues["q"].loop.poke()
            await until(lambda: stored(inner).seq > seq)  # the lazy write "happened"
        else:
            kind = {"not_landed": NOT_LANDED, "late": LATE, "refused": REFUSED}[how]
            store.inject("write_if_match", kind, key_contains="q/queue.json")
            try:  # another producer's push; its first PUT fails transiently
                await a.push("q", [NewJob(b'"y"', delay_ms=60_000)])
            except Exception:
                pass
            if how == "refused":
                await a.push("q", [NewJob(b'"z"', delay_ms=60_000)])
            store.land_late()  # (LATE: the old PUT arrives, conflicts, is dropped)
        loop = a._queues["q"].loop
        clock.advance(receipts.LAZY_WRITE_MS / 1000 * 3)  # plenty of lazy-write time
        loop.poke()
        # the lazy write has landed: nothing of the receipts is left unwritten
        await until(lambda: not loop._buffer and not loop._batch and loop.state is not None
                    and loop.state.receipts.unwritten_since is None)
        floors = dict(stored(inner).receipts.floors)
        clock.advance(6)  # x is due
        try:  # the held attempt 1 of claim 0 arrives at the (same, live) owner
            late = await a.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-0", floor=0)
        except InvalidRequest:
            late = "refused"
        await a.stop(drain_s=5)
        return late, floors

    late, floors = run(main())
    x = stored(inner).job("j0000000001")
    assert x is not None
    assert late == "refused" and x.status == "pending", (
        f"[{how}] late copy of claim 0 (answered [] before the client's claim 1 moved its "
        f"floor to 1) was answered {late!r}; job x is {x.status} under "
        f"{x.lease.token if x.lease else None} (attempts {x.attempts}/{x.max_attempts}), "
        f"a lease nobody holds; stored floors: {floors} -- the owner never crashed")
