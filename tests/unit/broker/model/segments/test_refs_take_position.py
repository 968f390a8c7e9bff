"""broker.model.segments.refs.take_position and next_untaken, the O(log runs)
steps a claim of a grouped segment's job takes, against the general
take_positions and untaken_spans, on random ``taken_at``. Pure."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.model.segments.refs import (
    next_untaken,
    take_position,
    take_positions,
    untaken_spans,
)
from tests.support.segment_refs import ref_for

COUNT = 40


def grouped(taken: set[int]):  # type: ignore[no-untyped-def]
    return take_positions(replace(ref_for(1, COUNT), groups=3), taken)


@given(st.sets(st.integers(0, COUNT - 1)), st.integers(0, COUNT - 1))
def test_take_position_is_take_positions_of_one(taken: set[int], pos: int) -> None:
    ref = grouped(taken)
    if pos in taken:
        with pytest.raises(ValueError, match=f"position {pos} is already taken"):
            take_position(ref, pos)
    else:
        assert take_position(ref, pos) == take_positions(ref, (pos,))


@given(st.sets(st.integers(0, COUNT - 1)), st.integers(0, COUNT + 2))
def test_next_untaken_is_the_first_untaken_span(taken: set[int], pos: int) -> None:
    ref = grouped(taken)
    spans = untaken_spans(ref, pos) if pos < COUNT else []
    assert next_untaken(ref, pos) == (spans[0][0] if spans else COUNT)
