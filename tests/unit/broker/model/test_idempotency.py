"""The windows of keys a queue remembers (broker/model/idempotency.py): a publish key is
recognised for as long as the queue's settings say, and the window is trimmed
and counted in the state's size."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker import limits
from broker.model import state as S
from broker.model import transitions as T
from broker.model.ops import NewJob, push_of
from broker.storage import FileStore
from tests.support.faults import Clock
from tests.support.inprocess import run, started, stored
from tests.support.states import new_queue


def test_a_replayed_stream_batch_inside_the_documented_window_adds_nothing() -> None:
    """A stream batch replayed 17 minutes and 20,000 other publishes later, inside
    dedup_ttl_s and far inside dedup_keys=1,000,000, is recognised as a duplicate
    and adds nothing. Publish keys were once bounded by a hard-coded 20,000,
    whatever dedup_keys said."""
    now = 1_800_000_000_000
    st = new_queue(now, S.QueueSettings(dedup_keys=1_000_000))  # 24 h TTL, 1M keys
    mine = "stream:0123456789abcdef:q-3f1c:41"
    first = T.apply(st, push_of([b'{"order": 1}', b'{"order": 2}'], once=mine), now)
    assert len(first.ids) == 2
    for i in range(20_000):  # other queries' batches over the next ~17 minutes
        T.apply(st, push_of([], once=f"stream:other{i % 20:02d}:q-x:{i}"), now + 50 * i)
    # the query restarts and Spark replays batch 41 (same key, same jobs), 17 min later
    again = T.apply(st, push_of([b'{"order": 1}', b'{"order": 2}'], once=mine),
                    now + 50 * 20_000)
    orders = [j.payload for j in st.jobs.values()]
    assert again.duplicate and len(orders) == 2, (
        f"replay of {mine!r} inside dedup_ttl_s and far inside dedup_keys=1,000,000 was "
        f"published again (duplicate={again.duplicate}): the queue holds {orders}")


def test_publish_keys_are_trimmed_and_counted(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 14: publish and stream once-keys were never trimmed nor counted.
    They have a window of their own (so per-job keys never evict them), trimmed
    by count and by dedup_ttl_s, and counted in the state size."""
    monkeypatch.setattr(limits, "ONCE_KEYS_MIN", 3)
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        a = await started(store, clock=clock)
        await a.create_queue("q", {"dedup_ttl_s": 60, "dedup_keys": 1})
        sizes = []
        for i in range(5):
            await a.stage("q", f"w-{i}/c0", b"\t1\n")
            await a.publish("q", f"w-{i}/", [f"w-{i}/c0"], once=f"write:w-{i}:" + "x" * 200)
            sizes.append((await a.stats("q"))["approx_state_bytes"])
        # a publish adds a job (~221 bytes) and its 210-character key: the key counts
        assert sizes[1] - sizes[0] > 221 + 200
        assert list(stored(store).once) == [f"write:w-{i}:" + "x" * 200 for i in (2, 3, 4)]
        clock.advance(61)  # past dedup_ttl_s: all of them go at the next commit
        await a.push("q", [NewJob(b"1")])
        assert stored(store).once == {}
        await a.stop(drain_s=5)

    run(main())
