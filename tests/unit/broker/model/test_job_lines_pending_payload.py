"""broker.model.job_lines.pending_payload: the payload of a pending line, read
without making its Job, is byte for byte what pending_from_line reads, for
plain and grouped lines and for a segment's lines, whatever a payload or a
group name spells (the fields the search looks for included)."""

from __future__ import annotations

import orjson
import pytest

from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.job_lines import (
    new_grouped_pending_lines,
    new_pending_lines,
    pending_from_line,
    pending_payload,
)
from broker.model.state import SegmentRef
from broker.paths import segment_key, segment_name

T0 = 1_767_225_600_000
# payloads and a group that spell the field the payload is found by
PAYLOADS = [b'{"n":1}', b'"\\",\\"payload\\":7"', b'{"a":"\\",\\"payload\\":","payload":2}',
            b"[1,2,3]", b"null", orjson.dumps({"k": 'q"\\\u00e9\u2028', "payload": {}})]
GROUPS = [None, '","payload":1,"x":"', "tenant-a", 'q"\\\u00e9\u2028', None, "g"]


def test_a_plain_lines_payload_is_what_pending_from_line_reads() -> None:
    lines = new_pending_lines(7, PAYLOADS, T0, 3)
    assert [pending_payload(line) for line in lines] == PAYLOADS
    assert [pending_payload(line) for line in lines] == [
        pending_from_line(7 + i, line).payload for i, line in enumerate(lines)]


def test_a_grouped_lines_payload_is_what_pending_from_line_reads() -> None:
    lines = new_grouped_pending_lines(1_000_000, PAYLOADS, GROUPS, T0, 5)
    assert [pending_payload(line) for line in lines] == PAYLOADS
    assert [pending_payload(line) for line in lines] == [
        pending_from_line(1_000_000 + i, line).payload for i, line in enumerate(lines)]


@pytest.mark.parametrize("priority", [0, -3, 9])
def test_a_segments_lines_payload_is_what_pending_from_line_reads(priority: int) -> None:
    data = encode_segment("q", 42, priority, T0, PAYLOADS, max_attempts=2)
    ref = SegmentRef(segment_key("q", segment_name(42, "0123abcd")), '"e1"', 42,
                     len(PAYLOADS), priority, T0)
    lines = segment_lines(data, ref)
    assert [pending_payload(line) for line in lines] == PAYLOADS
    assert [pending_payload(line) for line in lines] == [
        pending_from_line(42 + i, line).payload for i, line in enumerate(lines)]


def test_a_line_without_a_payload_is_refused() -> None:
    with pytest.raises(ValueError):
        pending_payload(b',\n{"id":"j0000000001","seq":1,"status":"pending"}')
