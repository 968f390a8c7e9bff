"""The dashboard's read of a queue's job groups (Dashboard.groups): for a queue
served here that uses groups, the stats' ``groups`` block and the group
settings, equal to what the stats answer; None for a queue without groups and
for one this broker does not serve (no read of its object)."""

from __future__ import annotations

from broker.model.ops import NewJob
from broker.service.dashboard import Dashboard
from broker.service.history import History
from broker.storage import MemoryStore
from tests.support.inprocess import run, started


def test_groups_answers_the_stats_block_and_group_settings_of_a_served_queue() -> None:
    async def main() -> None:
        store = MemoryStore()
        broker = await started(store)
        try:
            await broker.create_queue("g", {"group_limit": 1, "group_weights": {"b": 2},
                                            "max_attempts": 3})
            await broker.push("g", [NewJob(b"1", group="a"), NewJob(b"2", group="a"),
                                    NewJob(b"3", group="b"), NewJob(b"4")])
            await broker.push("plain", [b"1"])
            assert len(await broker.claim("g", "w", 10)) == 3
            dash = Dashboard(broker, History(broker))
            got = await dash.groups("g")
            stats = await broker.stats("g")
            assert got == {"settings": {"group_limit": 1, "group_weights": {"b": 2}},
                           "groups": stats["groups"]}
            assert got["groups"]["held_back"] == {"jobs": 1, "groups_at_limit": 1}  # (b: empty)
            assert await dash.groups("plain") is None
            other = await started(store, url="http://b")  # g is the first broker's
            try:
                assert other.served("g") is None
                assert await Dashboard(other, History(other)).groups("g") is None
            finally:
                await other.stop()
        finally:
            await broker.stop()

    run(main())
