"""broker.model.segment_state.HeldJobs.lines: a record's segment part read back
whole is the lines put, in order, each as line() gives it; a part not loaded
(never put, another record's, forgotten, or pushed out past the limit) is None."""

from __future__ import annotations

from broker.model.segment_state import HeldJobs
from broker.model.state import SegmentRef

REF = SegmentRef("q/segments/s", '"e1"', 1, 10, 0, 0)
LINES = [b',\n{"n":%d}' % i + b"x" * i for i in range(6)]


def test_a_part_reads_back_as_put() -> None:
    held = HeldJobs()
    span = (0, 6, REF.key, 2)
    held.put(7, span, REF, LINES)
    assert held.lines(7, span) == (REF, LINES)
    assert [held.line(7, span, i) for i in range(6)] == [(REF, line) for line in LINES]
    assert held.lines(8, span) is None and held.lines(7, (0, 6, REF.key, 3)) is None
    held.forget(7)
    assert held.lines(7, span) is None


def test_a_part_pushed_out_past_the_limit_is_not_loaded() -> None:
    held = HeldJobs(limit_bytes=sum(map(len, LINES)))
    held.put(1, (0, 6, REF.key, 0), REF, LINES)
    held.put(2, (0, 6, REF.key, 6), REF, LINES)  # (the oldest, not pinned, goes)
    assert held.lines(1, (0, 6, REF.key, 0)) is None
    assert held.lines(2, (0, 6, REF.key, 6)) == (REF, LINES)
