"""QueueTarget.carry of receipts marked replayed: a keyed claim's repeat
that handed its jobs out again is remembered in memory only (``replayed``);
the commit loop drops its state and re-reads the object after a write whose
reply was lost, and the mark must survive that, or the first attempt's
release (broker.http.disconnect) takes the jobs back from the client that
holds them through the repeat."""

from __future__ import annotations

import pytest

from broker.model.ops import CompleteItem
from broker.storage.memory import MemoryStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, FaultyStore
from tests.support.inprocess import run, started, stored


@pytest.mark.parametrize("fault", [LOST_REPLY, LOST_REPLY_412])
def test_a_release_after_a_reread_leaves_the_jobs_a_repeat_handed_out(fault: str) -> None:
    """Claim r-c1-1, its repeat answers the same job, then another call's write
    lands with its reply lost (the loop re-reads the object): the release of
    the first attempt changes nothing. The store shows the job claimed under
    the lease the repeat answered, attempt 1, and the repeat's token completes it."""
    async def main() -> None:
        store = FaultyStore(MemoryStore())
        broker = await started(store)
        try:
            await broker.push("q", [b'{"n":1}'])
            first = await broker.claim("q", "w", lease_s=600, request="r-c1-1")
            repeat = await broker.claim("q", "w", lease_s=600, request="r-c1-1")
            assert [j.token for j in repeat] == [j.token for j in first]
            store.inject("write_if_match", fault)
            await broker.push("q", [b'{"n":2}'])
            assert [f for _, f, _ in store.injected] == [fault]
            assert await broker.release("q", [first[0].token], "r-c1-1") == 0
            job = stored(store.inner).jobs[1]
            assert job.status == "claimed" and job.attempts == 1 and job.lease is not None
            assert job.lease.worker == "w"
            done = await broker.complete("q", [CompleteItem(repeat[0].token)])
            assert done[0].ok
            state = stored(store.inner)
            assert state.jobs[1].status == "completed" and state.jobs[2].status == "pending"
        finally:
            await broker.stop()

    run(main())
