"""QueueTarget.carry of the per-group token buckets: the commit loop drops its
state and re-reads the object after a write whose reply was lost; the owning
broker's groups keep the tokens they had, or each re-read would hand every
group a fresh burst (more than ``burst + rate * T`` claims in a window)."""

from __future__ import annotations

import pytest

from broker.model.ops import NewJob
from broker.storage.memory import MemoryStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, FaultyStore
from tests.support.inprocess import run, started, stored


@pytest.mark.parametrize("fault", [LOST_REPLY, LOST_REPLY_412])
def test_a_reread_keeps_each_groups_tokens(fault: str) -> None:
    """A group at 0.001 jobs a second, burst 2, takes its burst; a push's write
    lands with its reply lost (the loop re-reads); a claim then gets nothing of
    the group, and the store holds exactly the 2 claimed, the rest pending."""
    async def main() -> None:
        store = FaultyStore(MemoryStore())
        broker = await started(store)
        try:
            await broker.create_queue("q", {"group_rate_per_s": 0.001, "group_burst": 2})
            await broker.push("q", [NewJob(b'{"n":%d}' % i, group="a") for i in range(5)])
            first = await broker.claim("q", "w", max_jobs=5, lease_s=600)
            assert len(first) == 2
            store.inject("write_if_match", fault)
            await broker.push("q", [NewJob(b'{"n":9}', group="b")])
            assert [f for _, f, _ in store.injected] == [fault]
            again = await broker.claim("q", "w", max_jobs=5, lease_s=600)
            assert [stored(store.inner).jobs[int(j.id[1:])].group for j in again] == ["b"]
            state = stored(store.inner)
            statuses = [(j.group, j.status) for j in state.jobs.values()]
            assert statuses.count(("a", "claimed")) == 2
            assert statuses.count(("a", "pending")) == 3
        finally:
            await broker.stop()

    run(main())
