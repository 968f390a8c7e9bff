"""broker.model.format.decode meeting a grouped segment reference (``groups``,
``taken_at``: segment format 3): read from a version-6 head (the head a
grouped ref makes), its ``taken_at`` checked against the head's jobs; refused
from an older head, as a broker before groups refuses it. Pure."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from broker.errors import CorruptState
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.ops import PushPayloads
from broker.model.state import GROUPED_REF_BYTES, TAKEN_RUN_BYTES, SegmentRef
from broker.paths import segment_key, segment_name
from tests.support.states import committed, new_queue

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def head_with(ref: SegmentRef) -> bytes:
    """A queue of two inline jobs (seqs 1-2) and ``ref`` from seq 3, as encoded."""
    state = committed(new_queue(NOW), NOW)
    T.apply(state, PushPayloads((b"1", b"2")), NOW)
    state = committed(state, NOW)
    state.segment_refs = [ref]
    state.counters.enqueued = 2 + ref.count
    return codec.encode(state)


PLAIN = SegmentRef(segment_key("q", segment_name(3, "0123abcd")), '"e"', 3, 10, 0, NOW)


def test_an_ungrouped_ref_still_loads_from_a_v5_head() -> None:
    data = head_with(PLAIN)
    assert b'"version":5' in data
    assert decode_state(data).segment_refs == [PLAIN]


@pytest.mark.parametrize("ref", [
    replace(PLAIN, groups=2),
    replace(PLAIN, groups=2, taken=3, taken_at=(0, 2, 5, 1)),
])
def test_a_grouped_ref_makes_a_v6_head_and_reads_back(ref: SegmentRef) -> None:
    data = head_with(ref)
    assert b'"version":6' in data and b'"groups":2' in data
    state = decode_state(data)
    assert state.segment_refs == [ref]
    base = decode_state(head_with(PLAIN)).size_estimate()
    assert state.size_estimate() - base == GROUPED_REF_BYTES + TAKEN_RUN_BYTES * (
        len(ref.taken_at) // 2)


@pytest.mark.parametrize(("ref", "odd"), [
    (replace(PLAIN, groups=2), "['groups']"),
    (replace(PLAIN, groups=2, taken=3, taken_at=(0, 2, 5, 1)), "['groups', 'taken_at']"),
])
def test_a_grouped_ref_in_a_v5_head_is_refused_not_read_as_a_prefix(
        ref: SegmentRef, odd: str) -> None:
    data = head_with(ref).replace(b'"version":6', b'"version":5', 1)
    with pytest.raises(CorruptState, match=re.escape(
            f"segments[0]: segment reference fields {odd} missing or unknown")):
        decode_state(data)


def test_a_head_job_at_an_untaken_position_of_a_grouped_ref_is_refused() -> None:
    """Seq 3 (position 0) is in the head and in the segment as pending: refused
    naming the key, as for an ungrouped ref."""
    ref = replace(PLAIN, key=segment_key("q", segment_name(2, "0123abcd")), first_seq=2,
                  groups=2, taken=1, taken_at=(1, 1))
    state = committed(new_queue(NOW), NOW)
    T.apply(state, PushPayloads((b"1", b"2")), NOW)
    state = committed(state, NOW)
    state.segment_refs = [ref]
    state.counters.enqueued = 1 + ref.count
    with pytest.raises(CorruptState, match=re.escape(
            f"segments[0] ({ref.key}) still holds seq 2 (position 0 is not in its taken_at)")):
        decode_state(codec.encode(state))
    ok = replace(ref, taken=2, taken_at=(0, 2))
    state.segment_refs = [ok]
    assert decode_state(codec.encode(state)).segment_refs == [ok]
