"""Settled fences recorded as runs give what adding them one by one gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model import receipts

TTL_MS = 600_000
MANY = 10_000_000  # items a bucket may hold: every batch lands in the one bucket


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60), max_size=30), max_size=6))
def test_settled_fences_recorded_as_runs_match_adding_each(batches: list[list[int]]) -> None:
    one_by_one = receipts.Bucket(0)
    changes = 0
    recorded = receipts.Receipts()
    for fences in batches:
        for fence in sorted(fences):
            changes += one_by_one.add("completed", fence)
        recorded.record_settled("completed", fences, 0, TTL_MS, MANY)
    runs = recorded.buckets[0].runs if recorded.buckets else {}
    assert runs == one_by_one.runs
    assert recorded.settled_runs == changes
