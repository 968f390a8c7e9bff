"""broker.model.format.decode meeting a grouped segment reference (``groups``,
``taken_at``: segment format 3), which no broker writes yet: it is refused, as
a broker before groups refuses it, never read with its ``taken`` as a prefix.
Pure."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from broker.errors import CorruptState
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.ops import PushPayloads
from broker.model.state import SegmentRef
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


def test_an_ungrouped_ref_still_loads() -> None:
    assert decode_state(head_with(PLAIN)).segment_refs == [PLAIN]


@pytest.mark.parametrize(("ref", "odd"), [
    (replace(PLAIN, groups=2), "['groups']"),
    (replace(PLAIN, groups=2, taken=3, taken_at=(0, 2, 5, 1)), "['groups', 'taken_at']"),
])
def test_a_grouped_ref_is_refused_not_read_as_a_prefix(ref: SegmentRef, odd: str) -> None:
    data = head_with(ref)
    assert b'"groups":2' in data
    with pytest.raises(CorruptState, match=re.escape(
            f"segments[0]: segment reference fields {odd} missing or unknown")):
        decode_state(data)
