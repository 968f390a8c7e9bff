"""osqueue_spark.cli_out.error_rows: ``osqueue job`` shows a job's error
history a line a failure, oldest first as the job view gives it, each text's
first line that is not blank and how many lines follow; none for a job
without a history (never failed, or archived: ``errors`` absent)."""

from __future__ import annotations

from osqueue_spark.cli_out import error_rows


def test_each_failure_is_a_row_with_its_texts_first_line() -> None:
    errors = [
        {"attempt": 1, "failed_at": "2026-11-29T10:00:00.000Z",
         "error": "ValueError: bad row\nTraceback (most recent call last):\n  File x"},
        {"attempt": 2, "failed_at": "2026-11-29T10:00:01.000Z", "error": "\n  \nKeyError: 'a'  "},
        {"attempt": 3, "failed_at": "2026-11-29T10:00:02.000Z", "error": ""},
        {"attempt": 4, "failed_at": "2026-11-29T10:00:03.000Z", "error": "one\ntwo"},
    ]
    assert error_rows(errors) == [
        (1, "2026-11-29T10:00:00.000Z", "ValueError: bad row (+2 more lines)"),
        (2, "2026-11-29T10:00:01.000Z", "KeyError: 'a'"),
        (3, "2026-11-29T10:00:02.000Z", ""),
        (4, "2026-11-29T10:00:03.000Z", "one (+1 more line)"),
    ]


def test_no_rows_without_a_history() -> None:
    assert error_rows(None) == [] and error_rows([]) == []
