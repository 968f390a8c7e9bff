"""The key of a job in its group's heap (broker.model.groups.counts.source_key):
the ready key in fair order and for jobs without a group, the seq in fifo order;
either way the seq is its low bits and consecutive seqs give consecutive keys.
``ready_key_of`` equals the indexes' ``ready_key``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.limits import MAX_PRIORITY
from broker.model.groups.counts import ready_key_of, source_key
from broker.model.groups.names import NO_GROUP
from broker.model.indexes import SEQ_MASK, ready_key

priorities = st.integers(-MAX_PRIORITY, MAX_PRIORITY)
times = st.integers(0, 2**47)
seqs = st.integers(1, 2**47)


@given(priorities, times, seqs)
def test_ready_key_of_is_the_indexes_ready_key(priority: int, at: int, seq: int) -> None:
    assert ready_key_of(priority, at, seq) == ready_key(priority, at, seq)


@given(st.booleans(), st.integers(0, 5), priorities, times, seqs)
def test_the_key_is_the_seq_in_fifo_order_and_the_ready_key_else(
        fifo: bool, gid: int, priority: int, at: int, seq: int) -> None:
    key = source_key(fifo, gid, priority, at, seq)
    assert key == (seq if fifo and gid != NO_GROUP else ready_key(priority, at, seq))
    assert key & SEQ_MASK == seq
    assert source_key(fifo, gid, priority, at, seq + 1) == key + 1
