"""Which pushes go by reference, with groups: without ``grouped_segments`` a
grouped push stays in the head (never written to a segment without its
groups); with it, a grouped push whose jobs share their other options goes to
grouped segments. And how such a push lays its jobs out (group-major per
segment) and maps the ids back to request order."""

from __future__ import annotations

from broker.model.format.segment_format import MAX_SEGMENT_JOBS
from broker.model.ops import NewJob, Push
from broker.service.by_reference import grouped_layout, request_order, wanted


def test_a_grouped_push_goes_by_reference_only_with_grouped_segments() -> None:
    plain = Push(tuple(NewJob(b"%d" % i, priority=1) for i in range(100)))
    grouped = Push(tuple(NewJob(b"%d" % i, priority=1, group=f"g{i % 3}") for i in range(100)))
    assert wanted(plain, 10) and wanted(plain, 10, grouped=True)
    assert not wanted(grouped, 10)
    assert wanted(grouped, 10, grouped=True)
    mixed = Push(grouped.jobs[:50] + tuple(job._replace(priority=2) for job in grouped.jobs[50:]))
    assert not wanted(mixed, 10, grouped=True)  # (other options differ: into the head)
    keyed = Push((grouped.jobs[0]._replace(key="k"), *grouped.jobs[1:]))
    assert not wanted(keyed, 10, grouped=True)


def test_the_layout_is_group_major_per_segment_and_maps_ids_back() -> None:
    groups = [f"g{i % 3}" if i % 4 else None for i in range(12)]
    payloads = [b"%d" % i for i in range(12)]
    [(lo, gm)] = grouped_layout(payloads, groups)
    # (in the order of each group's first job, a stable sort)
    assert lo == 0 and gm.runs == ((None, 3), ("g1", 3), ("g2", 3), ("g0", 3))
    offsets = request_order(grouped_layout(payloads, groups))
    assert offsets is not None
    # request job i sits at position offsets[i], holding its own payload
    assert [gm.payloads[offsets[i]] for i in range(12)] == payloads


def test_an_already_sorted_push_is_not_permuted_and_big_ones_split() -> None:
    n = MAX_SEGMENT_JOBS + 10
    groups = ["a"] * (n // 2) + ["b"] * (n - n // 2)
    layout = grouped_layout([b"1"] * n, groups)
    assert [lo for lo, _ in layout] == [0, MAX_SEGMENT_JOBS]
    assert request_order(layout) is None  # (nothing moved: ids in seq order)
    assert layout[1][1].runs == (("b", 10),)
