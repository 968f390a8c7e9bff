"""In-process brokers for failure-path tests: start, crash, take over; read the store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import orjson

from broker import paths, timefmt
from broker.errors import NotTheBroker
from broker.model import state as S
from broker.model.format import archive, segment_format
from broker.model.format.decode import decode_state
from broker.model.held import job_at, segment_slices
from broker.model.ops import NewJob
from broker.model.segments.refs import pending_lines
from broker.retry import REAL_TIME, Pause
from broker.service.broker import Broker
from broker.service.config import BrokerConfig
from broker.storage import ObjectStore
from tests.support.faults import Clock

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
    """Run a test coroutine; a hang fails the test instead of wedging the suite."""
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


async def started(store: ObjectStore, url: str = "http://a", clock: Clock | None = None, *,
                  pause: Pause = REAL_TIME, fault_retry_s: float = 2.0,
                  **config: Any) -> Broker:
    """A started broker on ``store`` (``config``: ``BrokerConfig``'s fields, no
    self-test unless asked), on ``clock`` if given; ``pause`` and
    ``fault_retry_s`` as ``Broker``'s."""
    config.setdefault("self_test", False)
    broker = Broker(store, BrokerConfig(url=url, **config),
                    clock=clock.now_ms if clock else timefmt.now_ms,
                    monotonic=clock.monotonic if clock else time.monotonic,
                    pause=pause, fault_retry_s=fault_retry_s)
    await broker.start()
    return broker


async def crash(broker: Broker) -> None:
    """End a broker as a killed process would: no flush, no cleared record."""
    broker._stopping = True
    for task in broker._tasks:
        task.cancel()
    for q in broker._queues.values():
        q.archiver.cancel()
        if q.loop._task is not None:
            q.loop._task.cancel()
    await asyncio.sleep(0)


async def successor(store: ObjectStore, clock: Clock, url: str = "http://b",
                    lease_s: float = 30.0, **config: Any) -> Broker:
    """A broker that takes the queues of a crashed one over, once it has watched
    them for a broker lease (on its own, injected, monotonic clock); ``config``
    as :func:`started`'s."""
    b = await started(store, url, clock, **config)
    clock.advance(lease_s + 1)
    await b.watch()
    return b


async def owning_successor(store: ObjectStore, clock: Clock, url: str,
                           **config: Any) -> tuple[Broker, list[str]]:
    """A :func:`successor` of a crashed broker that owns queue ``q``, shown by a
    push of one job ``{"after":"crash"}`` it accepted: a commit of the crashed
    one may land meanwhile, so a push answered "not the broker" waits another
    broker lease (31 s of ``clock``) and tries again, 5 times at most (then
    ``AssertionError``). The broker and the push's ids."""
    b = await successor(store, clock, url=url, **config)
    for _ in range(5):
        try:
            return b, await b.push("q", [NewJob(b'{"after":"crash"}')])
        except NotTheBroker:
            clock.advance(31)
            await b.watch()
    raise AssertionError("no broker took the queue over")


def stored(store: ObjectStore, queue: str = "q") -> S.QueueState:
    return decode_state(store.read(paths.state_key(queue)).data)


def archive_lines(store: ObjectStore, queue: str = "q") -> list[dict[str, Any]]:
    """Every line of every archive object, as stored (no de-duplication)."""
    return [rec for key in archive.list_objects(store, queue)
            for rec in archive.decode_records(store.get(key))]


def bodies(n: int, start: int = 0) -> list[bytes]:
    """Payloads ``{"n": start}`` .. ``{"n": start + n - 1}`` as JSON bytes."""
    return [orjson.dumps({"n": i}) for i in range(start, start + n)]


def staged_chunks(count: int, per: int = 100) -> list[bytes]:
    """``count`` staged chunks of ``per`` default-option jobs each, payloads
    ``{"n": 0}`` onwards (chunk ``c`` holds ``c * per`` to ``c * per + per - 1``)."""
    return [b"".join(b'\t{"n":%d}\n' % (c * per + i) for i in range(per)) for c in range(count)]


async def stage_all(broker: Broker, queue: str, chunks: list[bytes],
                    write: str = "w-1") -> list[str]:
    """Stage ``chunks`` on ``broker`` as Spark's tasks would, one write id each
    (``{write}/p{c}-c0``); returns those ids, the publish's ``keep``."""
    keep = [f"{write}/p{c}-c0" for c in range(len(chunks))]
    for name, chunk in zip(keep, chunks, strict=True):
        await broker.stage(queue, name, chunk)
    return keep


def segment_payloads(store: ObjectStore, state: S.QueueState) -> list[Any]:
    """Payloads of the pending jobs in the segment objects ``state`` references,
    read from the store (each checked against its reference and etag)."""
    out = []
    for ref in state.segment_refs:
        got = store.read(ref.key)
        assert got.etag == ref.etag, f"segment {ref.key} changed behind the head"
        for seq, line in pending_lines(ref, segment_format.segment_lines(got.data, ref)):
            out.append(orjson.loads(segment_format.segment_job(seq, line, ref).payload))
    return out


def held_jobs(store: ObjectStore, state: S.QueueState) -> list[S.Job]:
    """The jobs claim records of ``state`` hold at segment parts (claimed) or
    name in done entries (completed, not yet dropped after their archive), read
    from their segment objects in the store (each checked against its etag)."""
    out = []
    for ref in state.segment_refs:
        held = segment_slices(state, ref)
        if not held:
            continue
        got = store.read(ref.key)
        assert got.etag == ref.etag, f"segment {ref.key} changed behind the head"
        lines = segment_format.segment_lines(got.data, ref, 0)
        out += [job_at(record, pos, ref, lines[at]) for at, record, pos in held]
    return out


def segment_objects(store: ObjectStore, queue: str = "q") -> list[str]:
    """The keys of every segment object of ``queue`` in the store."""
    return sorted(store.list(paths.segments_prefix(queue)))


def payloads(store: ObjectStore, queue: str = "q") -> list[Any]:
    """Payloads of every job the store holds: in the queue object, in the segment
    objects it references (pending, or held there by claim records), and
    archived (a completed job once: from the archive if it is there)."""
    state = stored(store, queue)
    held = held_jobs(store, state)
    in_queue = [orjson.loads(j.payload) for j in [*state.jobs.values(), *held]
                if j.status != "completed"]
    in_queue += segment_payloads(store, state)
    records = list(archive.read_all(store, queue))  # (read once, after the head)
    archived = {r["id"] for r in records}
    return sorted(in_queue + [rec["payload"] for rec in records]
                  + [orjson.loads(j.payload) for j in [*state.jobs.values(), *held]
                     if j.status == "completed" and j.id not in archived],
                  key=str)

async def archived_and_dropped(broker: Broker, store: ObjectStore, clock: Clock | None,
                               queue: str = "q", deleted: bool = True) -> None:
    """Wait until every completion of ``queue`` is archived and dropped from the
    landed head (completed lines and claim records' done entries gone, and with
    them the segment references only those named), advancing ``clock`` past the
    archive's drop delay as it goes (None: the broker runs on the real clock);
    then (``deleted``) until no segment object is left that the head does not
    reference (pass False where a lost reply left one to the sweep). Fails after
    ``until``'s timeout."""
    served = broker._queues[queue]

    def dropped() -> bool:
        if clock is not None:
            clock.advance(1)  # (the drop waits DROP_DELAY_S on the broker's clock)
        served.loop.poke()
        state = stored(store, queue)
        return not state.completed and not state.done_commits

    await until(dropped)
    if not deleted:
        return
    # (the deletes start once the loop has seen the drop land: after the store has it)
    await until(lambda: set(segment_objects(store, queue)) <= {
        ref.key for ref in stored(store, queue).segment_refs})


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait (on the event loop) until ``check()`` holds: the broker writes in the
    background; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)
