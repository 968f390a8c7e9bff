"""broker.model.segments.claims: claims take segment jobs into the head in the
queue's claim order, only from loaded lines, and every write of the result
decodes (the head never holds a seq twice, nor one in a segment's untaken range).
Pure: segments are made with encode_segment and "loaded" by hand."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.indexes import SEQ_MASK, ready_key
from broker.model.ops import Claim, NewJob, Purge, Push, PushPayloads
from broker.model.segments.claims import claim_refs, plan_windows
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import new_queue, read_back
from tests.support.tiers import examples

NOW = 1_767_225_600_000

# ("inline", n, priority, delay s) jobs pushed into the head, or ("seg", n,
# priority, due s) a segment of n jobs.
_BLOCK = st.one_of(
    st.tuples(st.just("inline"), st.integers(1, 6), st.integers(-1, 1), st.integers(-5, 5)),
    st.tuples(st.just("seg"), st.integers(1, 30), st.integers(-1, 1), st.integers(-5, 5)),
)


def _add_segment(state: QueueState, n: int, priority: int, due_ms: int,
                 windows: SegmentWindows, load: int | None = None) -> SegmentRef:
    """Reserve n seqs, "write" their segment, reference it, load ``load`` lines."""
    first = state.counters.enqueued + 1
    payloads = [b'{"n":%d}' % (first + i) for i in range(n)]
    data = encode_segment("q", first, priority, due_ms, payloads, max_attempts=3)
    ref = SegmentRef(segment_key("q", segment_name(first, "0123abcd")), f'"e{first}"',
                     first, n, priority, due_ms)
    state.counters.enqueued += n
    state.segment_refs.append(ref)
    lines = segment_lines(data, ref)
    windows.put(ref, 0, lines if load is None else lines[:load])
    return ref


def _build(blocks: list[tuple], windows: SegmentWindows) -> tuple[QueueState, list[int]]:
    """The queue of ``blocks``, all loaded, and every job's ready key."""
    state = new_queue(NOW)
    state.windows = windows
    keys: list[int] = []
    for kind, n, priority, due_s in blocks:
        first = state.counters.enqueued + 1
        due = NOW + due_s * 1000
        if kind == "inline":
            if priority == 0 and due_s == 0:
                T.apply(state, PushPayloads(tuple(b"%d" % i for i in range(n))), NOW)
            else:
                delay = max(0, due_s * 1000)
                T.apply(state, Push(tuple(NewJob(b"1", priority, delay) for _ in range(n))), NOW)
                due = NOW + delay
        else:
            _add_segment(state, n, priority, due, windows)
        keys += [ready_key(priority, due, seq) for seq in range(first, first + n)]
    return state, keys


@settings(max_examples=examples(120), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_BLOCK, min_size=1, max_size=8), st.lists(st.integers(1, 9), min_size=1))
def test_claims_take_every_due_job_once_in_claim_order(blocks: list[tuple],
                                                       sizes: list[int]) -> None:
    state, keys = _build(blocks, SegmentWindows())
    later = NOW + 10_000  # (every block is due within 5 s)
    got: list[int] = []
    for size in itertools.islice(itertools.cycle(sizes), len(keys) + 1):
        jobs = T.apply(state, Claim("w", size, 60_000), later).jobs
        got += [state.jobs[int(i[1:])].seq for i in jobs.ids]
        codec.stamp(state, "b", later, "c-x")
        again = read_back(codec.encode(state))  # every write decodes
        assert again.segment_refs == state.segment_refs
        assert again.approx_bytes == state.approx_bytes
        if not jobs:
            break
    assert got == [k & SEQ_MASK for k in sorted(keys)]
    assert all(ref.remaining for ref in state.segment_refs)  # exhausted ones dropped
    assert sum(ref.count for ref in state.dropped_refs) == sum(
        n for kind, n, _, _ in blocks if kind == "seg") - sum(
        ref.count for ref in state.segment_refs)


def test_a_claim_stops_at_a_segment_whose_lines_are_not_loaded() -> None:
    windows = SegmentWindows()
    state = new_queue(NOW)
    state.windows = windows
    ref = _add_segment(state, 10, 0, NOW - 1_000, windows, load=3)
    T.apply(state, PushPayloads((b"1", b"2")), NOW)  # later seqs, due later: after the segment
    jobs = T.apply(state, Claim("w", 8, 60_000), NOW).jobs
    assert list(jobs.ids) == [f"j{s:010d}" for s in range(ref.first_seq, ref.first_seq + 3)]
    assert state.segment_refs[0].taken == 3
    assert plan_windows(windows, claim_refs(state, 8, NOW)) == [(state.segment_refs[0], 7)]


def test_plan_windows_walks_segments_in_claim_order_within_the_budget() -> None:
    windows = SegmentWindows()
    state = new_queue(NOW)
    state.windows = windows
    low = _add_segment(state, 5, 0, NOW - 1_000, windows, load=0)
    high = _add_segment(state, 5, 2, NOW - 1_000, windows, load=0)
    _add_segment(state, 5, 0, NOW + 60_000, windows, load=0)  # not due
    assert plan_windows(windows, claim_refs(state, 7, NOW)) == [(high, 5), (low, 5)]
    assert plan_windows(windows, claim_refs(state, 3, NOW)) == [(high, 5)]


def test_segment_jobs_below_inline_ones_encode_in_seq_order() -> None:
    windows = SegmentWindows()
    state = new_queue(NOW)
    state.windows = windows
    ref = _add_segment(state, 2000, 0, NOW - 1_000, windows)
    T.apply(state, Push((NewJob(b"7", priority=-1),)), NOW)  # seq 2001, after the segment
    T.apply(state, Claim("w", 1500, 60_000), NOW)
    data = codec.encode(state)
    again = read_back(data)
    assert list(again.jobs) == [*range(1, 1501), 2001]
    assert again.segment_refs == [SegmentRef(ref.key, ref.etag, 1, 2000, 0, ref.run_at_ms, 1500)]
    pages = [job.seq for job in state.jobs.peek(1498)]
    assert pages == [1499, 1500, 2001]


def test_purge_of_pending_drops_every_reference_and_counts_its_jobs() -> None:
    windows = SegmentWindows()
    state = new_queue(NOW)
    state.windows = windows
    a = _add_segment(state, 4, 0, NOW - 1_000, windows)
    T.apply(state, Claim("w", 1, 60_000), NOW)
    T.apply(state, PushPayloads((b"1",)), NOW)
    result = T.apply(state, Purge(("pending",)), NOW)
    assert result.count == 3 + 1
    assert state.segment_refs == []
    assert [r.key for r in state.dropped_refs] == [a.key]
    assert read_back(codec.encode(state)).count_by_status()["pending"] == 0


def test_a_purge_of_dead_jobs_leaves_the_segments() -> None:
    windows = SegmentWindows()
    state = new_queue(NOW)
    state.windows = windows
    _add_segment(state, 4, 0, NOW - 1_000, windows)
    assert T.apply(state, Purge(("dead",)), NOW).count == 0
    assert len(state.segment_refs) == 1 and not state.dropped_refs
