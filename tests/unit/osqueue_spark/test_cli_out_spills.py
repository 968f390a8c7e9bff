"""osqueue_spark.cli_out.spill_rows: ``osqueue stats`` shows the jobs in spill
objects in one row while there are any, and nothing otherwise (a broker with
spills off, or an older broker whose stats have no such fields)."""

from __future__ import annotations

from osqueue_spark.cli_out import spill_rows


def test_the_spill_row_shows_the_jobs_and_objects_by_kind() -> None:
    stats = {"in_spills": {"dead": 40, "pending": 5}, "spill_objects": {"dead": 2, "pending": 1}}
    assert spill_rows(stats) == [("in spill objects", "40 dead, 5 redriven, in 3 object(s)")]


def test_no_spill_row_without_spill_objects() -> None:
    assert spill_rows({"in_spills": {"dead": 0, "pending": 0},
                       "spill_objects": {"dead": 0, "pending": 0}}) == []
    assert spill_rows({}) == []  # (an older broker's stats)
