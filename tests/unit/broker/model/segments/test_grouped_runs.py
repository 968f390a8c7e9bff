"""Claims over grouped segments (format 3) in broker.model.segments.grouped:
each group's run is a source of that group (oldest first within a group,
fair turns between groups, limits held), a claimed job moves into the head by
position (``taken_at`` grows, coalesced), a run's next job whose line is not
loaded ends the claim (never out of order), a directory not loaded yet means
no claim, a cancel makes a hole the run's cursor skips, and a decoded head
(a takeover) rebuilds the runs from ``taken_at`` and the counts from the
records. Pure: the segment's lines are "loaded" by hand."""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.directories import group_major
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    Configure,
    Inspect,
    NewJob,
    Push,
    PushPayloads,
)
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import committed, new_queue, read_back

T0 = 1_767_225_600_000


def grouped_segment(state: QueueState, groups: list[str | None], *, load: bool = True,
                    lines_loaded: int | None = None) -> SegmentRef:
    """Reserve seqs for jobs ``b"<i>"`` in ``groups[i]``, write them group-major
    as a v3 segment, reference it, and load its window and directory."""
    first = state.counters.enqueued + 1
    gm = group_major([b"%d" % i for i in range(len(groups))], groups)
    assert gm.runs is not None
    data = encode_segment("q", first, 0, T0 - 1_000, gm.payloads, max_attempts=3,
                          groups=gm.runs)
    ref = SegmentRef(segment_key("q", segment_name(first, "0123abcd")), f'"e{first}"',
                     first, len(groups), 0, T0 - 1_000, groups=len(gm.runs))
    state.counters.enqueued += len(groups)
    state.segment_refs.append(ref)
    if state.windows is None:
        state.windows = SegmentWindows()
    if load:
        lines = segment_lines(data, ref)
        if lines_loaded is not None:  # (a window that ends early: a bug guard)
            state.windows.put(ref, 0, lines[:lines_loaded])
            state.windows.runs[(ref.key, ref.etag)] = gm.runs
        else:
            state.windows.put_grouped(ref, lines, gm.runs)
    return ref


def claim(state: QueueState, n: int, now: int = T0) -> list[Any]:
    return list(T.apply(state, Claim("w", n, 30_000), now).jobs)


def names(jobs: list[Any]) -> list[int]:
    return [int(job.payload) for job in jobs]


def test_runs_are_claimed_oldest_first_per_group_in_fair_turns() -> None:
    state = new_queue(T0)
    groups = ["a" if i % 3 else "b" for i in range(30)]  # a: 20, b: 10, interleaved
    grouped_segment(state, groups)
    got = claim(state, 10)
    assert Counter(groups[n] for n in names(got)) == {"a": 5, "b": 5}  # fair turns
    for g in "ab":
        mine = [n for n in names(got) if groups[n] == g]
        assert mine == [i for i, x in enumerate(groups) if x == g][:5]  # oldest first
    [ref] = state.segment_refs
    # b's run is positions 0-9 (its job came first), a's 10-29: a prefix of each taken
    assert ref.taken == 10 and ref.taken_at == (0, 5, 10, 5)
    assert all(state.jobs[int(j.id[1:])].status == "claimed" for j in got)


def test_a_group_limit_holds_over_runs_and_a_settlement_frees_a_place() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 2}), T0)
    groups = [f"g{i % 4}" for i in range(40)]
    grouped_segment(state, groups)
    got = claim(state, 40)
    assert Counter(groups[n] for n in names(got)) == {f"g{g}": 2 for g in range(4)}
    assert claim(state, 40) == []
    g0 = [j for j in got if groups[int(j.payload)] == "g0"]
    T.apply(state, Complete((CompleteItem(g0[0].token),)), T0)
    more = claim(state, 40)
    assert [groups[n] for n in names(more)] == ["g0"]
    assert names(more) == [8]  # g0's third job


def test_inline_and_run_jobs_of_a_group_are_taken_in_seq_order() -> None:
    state = new_queue(T0)
    grouped_segment(state, ["a"] * 3 + ["b"] * 3)
    T.apply(state, Push((NewJob(b"100", group="a"),)), T0)  # a later inline job of a
    got = [j for j in claim(state, 20) if j.payload in (b"0", b"1", b"2", b"100")]
    assert [int(j.id[1:]) for j in got] == sorted(int(j.id[1:]) for j in got)
    assert names(got) == [0, 1, 2, 100]


def test_an_unloaded_line_ends_the_claim_and_an_unloaded_directory_claims_nothing() -> None:
    state = new_queue(T0)
    grouped_segment(state, ["a"] * 4 + ["b"] * 4, lines_loaded=2)
    got = claim(state, 8)
    assert 1 <= len(got) <= 2 and set(names(got)) <= {0, 1}
    other = new_queue(T0)
    grouped_segment(other, ["a"] * 4, load=False)
    T.apply(other, PushPayloads((b"9",)), T0)
    assert claim(other, 8) == [] and other.segment_refs[0].taken == 0


def test_a_cancel_makes_a_hole_the_run_skips() -> None:
    state = new_queue(T0)
    ref = grouped_segment(state, ["a"] * 4 + ["b"] * 2)
    [answer] = T.apply(state, Cancel((f"j{ref.first_seq + 1:010d}",)), T0).view
    assert answer.ok
    assert state.segment_refs[0].taken_at == (1, 1)
    got = claim(state, 10)
    assert sorted(names(got)) == [0, 2, 3, 4, 5]
    assert state.segment_refs == [] and state.dropped_refs[-1].key == ref.key  # exhausted


def test_a_decoded_head_rebuilds_runs_and_counts_from_taken_at_and_records() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 2}), T0)
    groups = [f"g{i % 3}" for i in range(30)]
    grouped_segment(state, groups)
    first = claim(state, 4)
    windows = state.windows
    state = committed(state, T0)
    data = codec.encode(state)
    assert b'"taken_at":[' in data
    again = read_back(data)
    again.windows = windows  # (the new owner loads the window again)
    more = claim(again, 30)
    taken = Counter(groups[n] for n in names(first) + names(more))
    assert taken == {f"g{g}": 2 for g in range(3)}  # the limit held across the reload
    assert not set(names(first)) & set(names(more))


def test_the_dashboards_pages_skip_taken_positions_both_ways() -> None:
    """broker.model.browse's pages over a grouped segment partly taken: forward,
    and back from the end (before_seq), they show its untaken jobs only, each
    once, in seq order."""
    state = new_queue(T0)
    groups = [f"g{i % 3}" for i in range(12)]
    ref = grouped_segment(state, groups)
    taken = claim(state, 3)  # (the first job of each group's run)
    claimed = {int(j.id[1:]) for j in taken}
    pending = [s for s in range(ref.first_seq, ref.first_seq + 12) if s not in claimed]
    seen: list[int] = []
    after = None
    while True:
        view = T.apply(state, Inspect("page", ("pending", after, None, 4)), T0).view
        seen += [int(r["id"][1:]) for r in view["rows"]]
        if not view["has_next"]:
            break
        after = seen[-1]
    assert seen == pending
    last = T.apply(state, Inspect("page", ("pending", None, ref.first_seq + 12, 4)), T0).view
    assert [int(r["id"][1:]) for r in last["rows"]] == pending[-4:]
    assert last["has_prev"]
