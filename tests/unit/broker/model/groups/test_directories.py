"""broker.model.groups.directories: a grouped segment's runs in memory (the group
of a position) and the group-major order of a push's chunk. Pure."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model.format import segment_format as sf
from broker.model.groups.directories import directory_of, group_at, group_major, run_at
from broker.model.groups.names import NO_GROUP, GroupNames
from tests.support.segment_refs import T0, key_of


def test_a_directory_maps_each_position_to_its_run_and_group() -> None:
    names = GroupNames()
    d = directory_of((("a", 3), (None, 1), ("b", 2)), names)
    assert d.starts == array("I", [0, 3, 4, 6]) and d.count == 6 and d.runs == 3
    assert d.gids == array("I", [names.gid("a"), NO_GROUP, names.gid("b")])
    assert [run_at(d, p) for p in range(6)] == [0, 0, 0, 1, 2, 2]
    assert [names.name(group_at(d, p)) for p in range(6)] == ["a", "a", "a", None, "b", "b"]
    for pos in (-1, 6):
        with pytest.raises(IndexError, match=rf"position {pos} is outside \[0, 6\)"):
            run_at(d, pos)


def test_directories_share_interned_names() -> None:
    names = GroupNames()
    one = directory_of((("a", 1), ("b", 1)), names)
    two = directory_of((("b", 5), ("c", 1)), names)
    assert one.gids[1] == two.gids[0] and len(names) == 3


group_lists = st.lists(st.sampled_from(["a", "b", "c", "d", None]), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(groups=group_lists)
def test_group_major_is_a_stable_grouping_with_its_directory(groups: list[str | None]) -> None:
    payloads = [b"%d" % i for i in range(len(groups))]
    out = group_major(payloads, groups)
    order = list(out.order)
    assert sorted(order) == list(range(len(groups)))  # a permutation
    assert list(out.payloads) == [payloads[i] for i in order]
    if all(g is None for g in groups):
        assert out.runs is None
        return
    assert out.runs is not None
    # the runs: each group once, its count, its jobs together in request order
    assert len({g for g, _ in out.runs}) == len(out.runs)
    at = 0
    for group, n in out.runs:
        idx = order[at:at + n]
        assert all(groups[i] == group for i in idx) and idx == sorted(idx)
        assert n == groups.count(group)
        at += n
    # a directory the segment writer takes, and reads back, position by position
    data = sf.encode_segment("q", 1, 0, T0, list(out.payloads), max_attempts=3, groups=out.runs)
    header = sf.read_header(data, key_of(1))
    assert header.groups == out.runs
    names = GroupNames()
    d = directory_of(header.groups, names)
    assert [names.name(group_at(d, p)) for p in range(len(groups))] == \
        [groups[i] for i in order]


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(1, 5)),
                     min_size=1, max_size=4, unique_by=lambda r: r[0]))
def test_an_already_grouped_chunk_is_neither_copied_nor_reordered(
        runs: list[tuple[str | None, int]]) -> None:
    """Contiguous groups in any order (the Spark writer's sort puts nulls first,
    the design's key last): kept as given, in one pass."""
    groups = [g for g, n in runs for _ in range(n)]
    payloads = [b"%d" % i for i in range(len(groups))]
    out = group_major(payloads, groups)
    assert out.payloads is payloads
    assert out.order == range(len(groups))
    assert out.runs == (None if all(g is None for g in groups) else tuple(runs))


def test_a_chunk_out_of_group_order_is_grouped_by_first_appearance() -> None:
    out = group_major([b"0", b"1", b"2", b"3", b"4"], ["b", None, "a", "b", None])
    assert list(out.order) == [0, 3, 1, 4, 2]
    assert out.runs == (("b", 2), (None, 2), ("a", 1))
    assert isinstance(out.order, array)


def test_group_major_refuses_mismatched_or_oversized_chunks() -> None:
    with pytest.raises(ValueError, match="2 payloads but 1 groups"):
        group_major([b"1", b"2"], ["a"])
    n = sf.MAX_SEGMENT_JOBS + 1
    with pytest.raises(ValueError, match=f"{n} jobs are more than a segment holds"):
        group_major([b"1"] * n, ["a"] * n)

