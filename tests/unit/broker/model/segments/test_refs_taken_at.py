"""broker.model.segments.refs, grouped refs: taken positions as runs (``taken_at``):
take, give back, "is taken", counts and spans, against a set of positions; and
the head bytes they cost. Pure. (Their JSON and its checks:
format/test_segment_format_groups.py.)"""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model.format import segment_format as sf
from broker.model.segments import refs as sg
from broker.model.state import SEGMENT_REF_BYTES, SegmentRef
from tests.support.segment_refs import key_of, ref_for
from tests.support.tiers import examples


def grouped(count: int, taken_at: tuple[int, ...] = (), first_seq: int = 1) -> SegmentRef:
    return replace(ref_for(first_seq, count), groups=1, taken=sg.taken_count(taken_at),
                   taken_at=taken_at)


def positions_of(ref: SegmentRef) -> set[int]:
    t = ref.taken_at
    return {p for s, n in zip(t[::2], t[1::2], strict=True) for p in range(s, s + n)}


def spans_of(free: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for p in free:
        if out and out[-1][1] == p:
            out[-1] = (out[-1][0], p + 1)
        else:
            out.append((p, p + 1))
    return out


def agrees(ref: SegmentRef, model: set[int]) -> None:
    """Every question about ``ref``'s taken positions answered as the set ``model`` does."""
    count = ref.count
    assert positions_of(ref) == model and ref.taken == len(model)
    # canonical: what the decoder's check accepts (ascending, disjoint, coalesced)
    if model:
        assert sf.check_taken_at(list(ref.taken_at), count, ref.taken, "t") == ref.taken_at
    else:
        assert ref.taken_at == ()
    assert sf.ref_from_json(orjson.loads(sf.ref_bytes(ref)), "w", grouped_ok=True) == ref
    assert [sg.is_taken(ref, p) for p in range(count)] == [p in model for p in range(count)]
    free = [p for p in range(count) if p not in model]
    assert sg.untaken_spans(ref) == spans_of(free)
    for lo in range(0, count + 1, 3):
        for hi in range(lo, count + 1, 4):
            assert sg.taken_between(ref, lo, hi) == len(model & set(range(lo, hi)))
            assert sg.untaken_spans(ref, lo, hi) == spans_of([p for p in free if lo <= p < hi])
        assert sg.next_untaken(ref, lo) == min((p for p in free if p >= lo), default=count)
    assert sg.size_estimate([ref]) == SEGMENT_REF_BYTES + sg.GROUPED_REF_BYTES + \
        sg.TAKEN_RUN_BYTES * len(ref.taken_at) // 2


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, list[tuple[bool, list[int]]]]:
    count = draw(st.integers(1, 40))
    taken: set[int] = set()
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        give_back = bool(taken) and draw(st.booleans())
        pool = sorted(taken) if give_back else [p for p in range(count) if p not in taken]
        if not pool:
            break
        chosen = draw(st.lists(st.sampled_from(pool), min_size=1, unique=True))
        taken = taken - set(chosen) if give_back else taken | set(chosen)
        steps.append((give_back, chosen))
    return count, steps


@settings(max_examples=examples(300), deadline=None)
@given(history=histories())
def test_taking_and_giving_back_positions_agrees_with_a_set(
        history: tuple[int, list[tuple[bool, list[int]]]]) -> None:
    count, steps = history
    ref, model = grouped(count), set()
    agrees(ref, model)
    for give_back, chosen in steps:
        if give_back:
            ref, model = sg.untake_positions(ref, chosen), model - set(chosen)
        else:
            ref, model = sg.take_positions(ref, chosen), model | set(chosen)
        agrees(ref, model)


def test_runs_taken_as_prefixes_stay_one_interval_a_partly_taken_run() -> None:
    """The directory's runs [0, 100), [100, 103), [103, 1000): each served oldest
    first, so what is taken of a run is its prefix; fully taken neighbours merge."""
    ref = grouped(1000)
    ref = sg.take_positions(ref, range(0, 40))  # run 0, partly
    ref = sg.take_positions(ref, range(103, 110))  # run 2, partly
    assert ref.taken_at == (0, 40, 103, 7)
    ref = sg.take_positions(ref, range(100, 103))  # run 1, all of it: merges with run 2's
    assert ref.taken_at == (0, 40, 100, 10)
    ref = sg.take_positions(ref, range(40, 100))  # run 0 done: one interval
    assert ref.taken_at == (0, 110) and ref.taken == 110
    assert sg.taken_between(ref, 103, 1000) == 7  # run 2's next job: 103 + 7
    ref = sg.untake_positions(ref, [109])  # a release of run 2's last taken job
    assert ref.taken_at == (0, 109) and ref.taken == 109


def test_a_hole_costs_one_interval_and_the_cursor_skips_it() -> None:
    ref = sg.take_positions(grouped(10), [0, 1, 5])  # a run's prefix, and a cancel at 5
    assert ref.taken_at == (0, 2, 5, 1)
    assert sg.next_untaken(ref, 2) == 2 and sg.next_untaken(ref, 5) == 6
    assert sg.next_untaken(sg.take_positions(ref, [2, 3, 4]), 0) == 6


@pytest.mark.parametrize(("taken_at", "positions", "match"), [
    ((0, 2), [1], r"position 1 is already taken"),
    ((0, 2, 5, 1), [4, 5, 6], r"position 5 is already taken"),
    ((), [3, 3], r"position 3 is given twice"),
    ((), [10], r"position 10 is outside \[0, 10\)"),
    ((), [-1], r"position -1 is outside \[0, 10\)"),
    ((), [True], r"position True is outside"),
])
def test_taking_a_position_twice_or_outside_is_refused_naming_the_segment(
        taken_at: tuple[int, ...], positions: list[int], match: str) -> None:
    ref = grouped(10, taken_at)
    with pytest.raises(ValueError, match=rf"^segment {ref.key}: {match}"):
        sg.take_positions(ref, positions)


def test_giving_back_a_position_not_taken_is_refused() -> None:
    ref = grouped(10, (0, 2, 5, 1))
    with pytest.raises(ValueError, match=rf"^segment {ref.key}: position 2 is not taken"):
        sg.untake_positions(ref, [1, 2])
    with pytest.raises(ValueError, match=r"position 4 is not taken"):
        sg.untake_positions(ref, [4, 5])


def test_an_ungrouped_ref_keeps_its_prefix_and_refuses_positions() -> None:
    ref = ref_for(1, 10, taken=4)
    assert [sg.is_taken(ref, p) for p in range(10)] == [True] * 4 + [False] * 6
    assert sg.taken_between(ref, 2, 6) == 2 and sg.untaken_spans(ref, 2, 8) == [(4, 8)]
    assert sg.next_untaken(ref, 0) == 4 and sg.size_estimate([ref]) == SEGMENT_REF_BYTES
    for change in (sg.take_positions, sg.untake_positions):
        with pytest.raises(ValueError, match=rf"segment {ref.key} is not grouped"):
            change(ref, [5])
    assert sf.ref_bytes(ref) == orjson.dumps(sf.ref_to_json(ref))
    assert b"groups" not in sf.ref_bytes(ref) and b"taken_at" not in sf.ref_bytes(ref)


def test_coalesce_merges_adjacent_spans_and_refuses_overlaps() -> None:
    assert sg.coalesce([(0, 2), (2, 3), (6, 0), (7, 1), (8, 2)]) == (0, 5, 7, 3)
    assert sg.coalesce([]) == ()
    for spans in ([(0, 3), (2, 1)], [(4, 1), (1, 1)], [(0, -1)], [(-1, 1)]):
        with pytest.raises(ValueError, match="overlaps or comes before"):
            sg.coalesce(spans)


@settings(max_examples=examples(100), deadline=None)
@given(starts=st.sets(st.integers(0, 65_534), max_size=300), taken_first=st.booleans())
def test_the_size_estimate_covers_a_grouped_refs_line(starts: set[int],
                                                      taken_first: bool) -> None:
    """For a ref as S3 names one (its etag a quoted md5), the estimate is at least
    the line's bytes, whatever ``taken_at`` holds (max_state_bytes sees it)."""
    ref = replace(ref_for(10**9, 65_536), etag='"' + "0f" * 16 + '"', groups=65_536)
    ref = sg.take_positions(ref, [*starts, 65_535] if taken_first else starts)
    assert len(sf.ref_bytes(ref)) + 2 <= sg.size_estimate([ref])  # (",\n" before it)


def test_the_size_estimate_sums_refs() -> None:
    refs = [ref_for(1, 5), grouped(5, (0, 1, 3, 1), first_seq=6)]
    assert sg.size_estimate(refs) == 2 * SEGMENT_REF_BYTES + sg.GROUPED_REF_BYTES + \
        2 * sg.TAKEN_RUN_BYTES
    assert key_of(6) == refs[1].key
