"""Broker.claim's ``gone``: once the caller has left, the long poll claims
nothing more. A job pushed as the caller leaves (both wake the waiting claim
in one turn of the loop) is not leased to the gone caller, to be handed back
by a release that may fail and leave it to a long lease."""

from __future__ import annotations

import asyncio

from broker.storage.memory import MemoryStore
from tests.support.faults import FaultyStore
from tests.support.inprocess import run, started, stored, until


def test_a_job_pushed_as_the_caller_leaves_is_never_leased_to_it() -> None:
    """The push's write lands and the caller leaves at that moment: the claim
    returns no job and grants no lease (the stored fence counter stays 0); the
    job is pending, attempt 0, and the next claim gets it on its attempt 1."""
    async def main() -> None:
        store = FaultyStore(MemoryStore())
        broker = await started(store)
        try:
            await broker.create_queue("q")
            loop = asyncio.get_running_loop()
            gone: asyncio.Future[None] = loop.create_future()
            waiting = asyncio.ensure_future(broker.claim("q", "gone", lease_s=600, wait_s=20,
                                                         gone=gone))
            await until(lambda: broker.metrics._ops[("q", "claim", "ok")] >= 1)

            def leave(key: str) -> None:
                loop.call_soon_threadsafe(lambda: gone.done() or gone.set_result(None))

            store.inject("write_if_match", None, after=leave)
            await broker.push("q", [b'{"n":1}'])
            assert list(await asyncio.wait_for(waiting, 5)) == []
            state = stored(store.inner)
            assert state.counters.fence == 0
            job = state.jobs[1]
            assert job.status == "pending" and job.attempts == 0 and job.lease is None
            got = await broker.claim("q", "w2", lease_s=60)
            assert got[0].attempt == 1
        finally:
            await broker.stop()

    run(main())
