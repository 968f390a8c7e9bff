"""The windows of keys a queue remembers (broker/windows.py): a publish key is
recognised for as long as the queue's settings say."""

from __future__ import annotations

from broker import state as S
from broker import transitions as T


def test_a_replayed_stream_batch_inside_the_documented_window_adds_nothing() -> None:
    """A stream batch replayed 17 minutes and 20,000 other publishes later, inside
    dedup_ttl_s and far inside dedup_keys=1,000,000, is recognised as a duplicate
    and adds nothing. Publish keys were once bounded by a hard-coded 20,000,
    whatever dedup_keys said."""
    now = 1_800_000_000_000
    st = T.new_state(now, S.Settings(dedup_keys=1_000_000))  # 24 h TTL, 1M keys
    mine = "stream:0123456789abcdef:q-3f1c:41"
    first = T.apply(st, T.push_of([b'{"order": 1}', b'{"order": 2}'], once=mine), now)
    assert len(first.ids) == 2
    for i in range(20_000):  # other queries' batches over the next ~17 minutes
        T.apply(st, T.push_of([], once=f"stream:other{i % 20:02d}:q-x:{i}"), now + 50 * i)
    # the query restarts and Spark replays batch 41 (same key, same jobs), 17 min later
    again = T.apply(st, T.push_of([b'{"order": 1}', b'{"order": 2}'], once=mine),
                    now + 50 * 20_000)
    orders = [j.payload for j in st.jobs.values()]
    assert again.duplicate and len(orders) == 2, (
        f"replay of {mine!r} inside dedup_ttl_s and far inside dedup_keys=1,000,000 was "
        f"published again (duplicate={again.duplicate}): the queue holds {orders}")
