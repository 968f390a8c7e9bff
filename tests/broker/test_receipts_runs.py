"""Batch paths give what the one-at-a-time paths they stand in for give."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker import receipts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60), max_size=30), max_size=6))
def test_settled_fences_added_as_runs_match_adding_each(batches: list[list[int]]) -> None:
    one_by_one, by_runs = receipts.Bucket(0), receipts.Bucket(0)
    changes_one = changes_runs = 0
    for fences in batches:
        for fence in sorted(fences):
            changes_one += one_by_one.add("completed", fence)
        ordered = sorted(fences)
        start = 0
        while start < len(ordered):
            stop = start + 1
            while stop < len(ordered) and ordered[stop] == ordered[stop - 1] + 1:
                stop += 1
            changes_runs += by_runs.add_run("completed", ordered[start], stop - start)
            start = stop
    assert by_runs.runs == one_by_one.runs
    assert changes_runs == changes_one
