"""Properties of the head's segment references (``QueueState.segment_refs``)
under encode -> decode: any object the broker writes with references (made by
hand here: nothing makes a segment yet) decodes to the same state and bytes,
and stays decodable after every kind of write the broker applies to it (a
refusal at the next load would strand the queue)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    Fail,
    FailItem,
    Purge,
    PushPayloads,
    Reclaim,
    Redrive,
)
from broker.model.state import SegmentRef
from broker.model.views import next_wakeup_ms, stats
from broker.paths import segment_key, segment_name
from tests.support.states import committed, new_queue, read_back

NOW = 1_767_225_600_000

# A block of seqs: ("inline", n) jobs in the head, or ("ref", count, taken,
# priority, due in s) a segment whose first ``taken`` jobs moved into the head.
_BLOCK = st.one_of(
    st.tuples(st.just("inline"), st.integers(1, 5)),
    st.tuples(st.just("ref"), st.integers(1, 40), st.integers(0, 40), st.integers(-2, 2),
              st.integers(-100, 100)),
)


def _state(blocks: list[tuple]) -> tuple[list[SegmentRef], bytes]:
    """The bytes of a queue laid out as ``blocks`` (seqs handed out in order)."""
    state = new_queue(NOW)
    refs: list[SegmentRef] = []
    for block in blocks:
        first = state.counters.enqueued + 1
        if block[0] == "inline":
            T.apply(state, PushPayloads(tuple(b"%d" % i for i in range(block[1]))), NOW)
            continue
        _, count, taken, priority, due_s = block
        taken = min(taken, count)
        if taken:  # the taken part: in the head (claimed, some completed)
            T.apply(state, PushPayloads(tuple(b"%d" % i for i in range(taken))), NOW)
        state.counters.enqueued = first + count - 1
        refs.append(SegmentRef(segment_key("q", segment_name(first, "0123abcd")),
                               f'"e{first}"', first, count, priority,
                               NOW + due_s * 1000, taken))
    got = T.apply(state, Claim("w", 7, 60_000), NOW)
    T.apply(state, Complete(tuple(CompleteItem(j.token) for j in got.jobs[:3])), NOW)
    state = committed(state, NOW)
    state.segment_refs = refs
    return refs, codec.encode(state)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_BLOCK, min_size=1, max_size=8))
def test_encode_decode_of_refs_and_head_jobs_is_exact(blocks: list[tuple]) -> None:
    refs, data = _state(blocks)
    state = decode_state(data)
    assert state.segment_refs == refs
    assert codec.encode(state) == data


_OPS = st.sampled_from(["push", "claim", "complete", "fail", "purge", "reclaim", "redrive"])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_BLOCK, min_size=1, max_size=6), st.lists(_OPS, max_size=8))
def test_every_write_to_an_object_with_refs_decodes_at_the_next_load(
        blocks: list[tuple], ops: list[str]) -> None:
    """Each write is encoded and decoded as a takeover would read it: never
    refused, the references unchanged but by a purge (no segment line is
    loaded, so no claim takes from one), the pending count the head's pending
    plus the segments' untaken jobs."""
    refs, data = _state(blocks)
    state = read_back(data)
    now = NOW
    held: list[str] = []
    for i, name in enumerate(ops):
        now += 1_000
        if name == "push":
            T.apply(state, PushPayloads((b'"p"', b'"q"')), now)
        elif name == "claim":
            held += [j.token for j in T.apply(state, Claim("w", 3, 5_000), now).jobs]
        elif name == "complete" and held:
            T.apply(state, Complete((CompleteItem(held.pop()),)), now)
        elif name == "fail" and held:
            T.apply(state, Fail((FailItem(held.pop(), "x", None),)), now)
        elif name == "purge":  # (drops every reference: their jobs are pending)
            T.apply(state, Purge(), now)
            refs = []
        elif name == "reclaim":
            now += 10_000
            T.apply(state, Reclaim(), now)
        elif name == "redrive":
            T.apply(state, Redrive(), now)
        codec.stamp(state, "b", now, f"c-{i}")
        again = read_back(codec.encode(state))
        assert again.segment_refs == refs
        head_pending = again.jobs.count_by_status()["pending"]
        assert again.count_by_status()["pending"] == \
            head_pending + sum(r.count - r.taken for r in refs)
        view = stats(again, now)
        assert view["total"] == len(again.jobs) + sum(r.count - r.taken for r in refs) \
            - again.count_by_status()["completed"]
        wake = next_wakeup_ms(again, now)
        later = [r.run_at_ms for r in refs if r.taken < r.count and r.run_at_ms > now]
        if later:
            assert wake is not None and wake <= min(later)
        state = again
