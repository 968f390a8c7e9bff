"""Grouped segment runs in the claims of broker.model.segments.grouped when the
owner's clock steps back: a run whose next job is not due at the earlier time
stays its group's source, so its jobs are claimed once due (a step back of 1 ms
dropped it from its group's heap, its jobs pending and never claimed until a
takeover or a settings change)."""

from __future__ import annotations

from collections import Counter

from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.directories import group_major
from broker.model.ops import (
    Claim,
    Configure,
    PushPayloads,
    Reserve,
)
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import QUEUE, new_queue

T0 = 1_767_225_600_000
LEASE_MS = 600_000


def claim(state: QueueState, n: int, now: int) -> Counter[str | None]:
    got = T.apply(state, Claim("w", n, LEASE_MS), now).jobs
    return Counter(state.jobs[int(job.id[1:])].group for job in got)


def push_segment(state: QueueState, groups: list[str | None], now: int) -> int:
    """A grouped segment pushed by reference (its lines loaded); its first seq."""
    first = T.apply(state, Reserve(len(groups), 8), now).ids.first
    gm = group_major([b"%d" % (100 + i) for i in range(len(groups))], groups)
    assert gm.runs is not None
    data = encode_segment(QUEUE, first, 0, now, gm.payloads, max_attempts=3,
                          groups=gm.runs)
    ref = SegmentRef(segment_key(QUEUE, segment_name(first, "0123abcd")), f'"e{first}"',
                     first, len(groups), 0, now, groups=len(gm.runs))
    if state.windows is None:
        state.windows = SegmentWindows()
    T.apply(state, PushPayloads((), refs=(ref,)), now)
    state.windows.put_grouped(ref, segment_lines(data, ref), gm.runs)
    return first


def test_a_clock_stepped_back_1_ms_strands_no_fair_segment_run() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 5}), T0)
    first = push_segment(state, ["a", "a", "a"], T0)  # (due at T0)
    got = T.apply(state, Claim("w", 1, LEASE_MS), T0).jobs
    assert [int(j.id[1:]) for j in got] == [first]
    assert claim(state, 5, T0 - 1) == {}  # (the segment's jobs are due at T0)
    got = T.apply(state, Claim("w", 5, LEASE_MS), T0 + 10).jobs
    assert sorted(int(j.id[1:]) for j in got) == [first + 1, first + 2]
    assert not state.segment_refs
