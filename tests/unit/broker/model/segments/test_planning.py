"""broker.model.segments.planning: which grouped segments a batch of claims
may reach (the segments of the next jobs of the groups dispatch picks first,
in pick order, at most MAX_WINDOWS; before any claim, the first segment),
which directories a claim needs, and a claim that reaches a run whose lines
are not loaded ending there: never out of order, never a job twice, the rest
claimed once the lines are loaded. Pure: lines and directories are "loaded"
by hand."""

from __future__ import annotations

from typing import Any

from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.directories import group_major
from broker.model.ops import Claim, Configure
from broker.model.segments.planning import claim_sources, directories_wanted
from broker.model.state import MAX_WINDOWS, QueueState, SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import new_queue

T0 = 1_767_225_600_000


def grouped_segment(state: QueueState, groups: list[str | None], *, lines: bool,
                    delay_ms: int = -1_000, priority: int = 0
                    ) -> tuple[SegmentRef, list[bytes], Any]:
    """Reserve seqs for jobs ``b"<seq>"`` in ``groups[i]``, write them
    group-major as a v3 segment and reference it; its directory is loaded,
    its lines only if ``lines``. The ref, its lines and its runs."""
    first = state.counters.enqueued + 1
    gm = group_major([b"%d" % (first + i) for i in range(len(groups))], groups)
    assert gm.runs is not None
    data = encode_segment("q", first, priority, T0 + delay_ms, gm.payloads, max_attempts=3,
                          groups=gm.runs)
    ref = SegmentRef(segment_key("q", segment_name(first, "0123abcd")), f'"e{first}"',
                     first, len(groups), priority, T0 + delay_ms, groups=len(gm.runs))
    state.counters.enqueued += len(groups)
    state.segment_refs.append(ref)
    if state.windows is None:
        state.windows = SegmentWindows()
    got = segment_lines(data, ref)
    state.windows.put_directory(ref, gm.runs)
    if lines:
        state.windows.put_grouped(ref, got, gm.runs)
    return ref, got, gm.runs


def claim(state: QueueState, n: int, now: int = T0) -> list[Any]:
    return list(T.apply(state, Claim("w", n, 30_000), now).jobs)


def payloads(jobs: list[Any]) -> list[int]:
    return [int(job.payload) for job in jobs]


def test_the_segments_of_the_groups_next_jobs_in_pick_order() -> None:
    state = new_queue(T0)
    one, _, _ = grouped_segment(state, ["a", "b"] * 3, lines=False)
    two, _, _ = grouped_segment(state, ["a", "b", "c"] * 2, lines=False)
    three, _, _ = grouped_segment(state, ["c", "d"] * 2, lines=False)
    # before any claim: the groups are not built; the first segment (heads concentrate there)
    assert [r.key for r in claim_sources(state, 10, T0)] == [one.key]
    assert claim(state, 10) == []  # (its lines are not loaded: the claim ends at once)
    # a, b's next jobs are in the first segment, c's in the second, d's in the third
    assert [r.key for r in claim_sources(state, 10, T0)] == [one.key, two.key, three.key]
    assert [r.key for r in claim_sources(state, 2, T0)] == [one.key]
    assert [r.key for r in claim_sources(state, 3, T0)] == [one.key, two.key]
    assert claim_sources(state, 0, T0) == []


def test_at_most_max_windows_segments_however_many_groups_head_elsewhere() -> None:
    state = new_queue(T0)
    refs = [grouped_segment(state, [f"g{i}"] * 2, lines=False)[0]
            for i in range(MAX_WINDOWS + 4)]
    assert claim(state, 50) == []
    assert [r.key for r in claim_sources(state, 50, T0)] == [r.key for r in
                                                             refs[:MAX_WINDOWS]]


def test_before_any_claim_the_first_segment_in_claim_order() -> None:
    state = new_queue(T0)
    low, _, _ = grouped_segment(state, ["a", "b"], lines=False)
    grouped_segment(state, ["c"], lines=False, delay_ms=60_000, priority=9)  # (not due)
    high, _, _ = grouped_segment(state, ["d"], lines=False, priority=5)
    assert claim_sources(state, 10, T0) == [high]  # (priority first, as a claim takes)
    assert claim(state, 1) == []  # (its lines are not loaded: the claim ends at once)
    assert claim_sources(state, 1, T0) == [high]  # d's head: the first pick
    assert claim_sources(state, 10, T0) == [high, low]


def test_directories_of_due_segments_or_in_fifo_order_of_every_one() -> None:
    state = new_queue(T0)
    due, _, _ = grouped_segment(state, ["a"] * 2, lines=False)
    later, _, _ = grouped_segment(state, ["a"] * 2, lines=False, delay_ms=60_000)
    assert state.windows is not None
    state.windows.runs.clear()
    assert directories_wanted(state, T0) == [due]
    assert directories_wanted(state, T0 + 60_000) == [due, later]
    T.apply(state, Configure({"group_order": "fifo"}), T0)
    assert directories_wanted(state, T0) == [due, later]
    state.windows.put_directory(due, (("a", 2),))
    assert directories_wanted(state, T0) == [later]


def test_a_claim_reaching_an_unloaded_run_ends_and_goes_on_once_it_is_loaded() -> None:
    state = new_queue(T0)
    first, _, _ = grouped_segment(state, ["a", "a", "b"], lines=True)
    second, lines, runs = grouped_segment(state, ["a", "a", "b", "b"], lines=False)
    got = claim(state, 10)
    # a's two jobs of the first segment; a's third is in the second, not loaded: the
    # claim ends there (b's job, later in the turns, waits for the next claim)
    assert payloads(got) == [1, 2]
    assert state.segment_refs[1].key == second.key and state.segment_refs[1].taken == 0
    # the next batch plans both: a's next job is in the second segment, b's in the first
    assert {r.key for r in claim_sources(state, 10, T0)} == {first.key, second.key}
    assert state.windows is not None
    state.windows.put_grouped(state.segment_refs[1], lines, runs)
    more = claim(state, 10)
    assert sorted(payloads(more)) == [3, 4, 5, 6, 7]
    every = payloads(got) + payloads(more)
    assert sorted(every) == list(range(1, 8)) and len(set(every)) == 7  # each once
    group_of = {1: "a", 2: "a", 3: "b", 4: "a", 5: "a", 6: "b", 7: "b"}  # (seq: group-major)
    for group in ("a", "b"):  # in push (seq) order within a group
        mine = [n for n in every if group_of[n] == group]
        assert mine == sorted(mine)
