"""The head object's segment references (format version 4):
``"segments"`` in the object, :attr:`QueueState.segment_refs` in memory. These
states are made by hand, so each test has exactly the shape it names: a queue
with jobs inline and two references whose seqs follow them.

Pins that such an object decodes and re-encodes byte for byte, how the field
is laid out, and each refusal of :func:`broker.model.format.decode.decode_state`'s
cross-checks (a ``CorruptState`` naming the field, never quoting a payload).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.errors import CorruptState, SegmentMissing
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.format.segment_format import ref_to_json
from broker.model.ops import NewJob, PushPayloads
from broker.model.state import SEGMENT_REF_BYTES, SegmentRef
from broker.model.views import next_wakeup_ms, stats
from broker.paths import segment_key, segment_name
from broker.storage import FileStore
from tests.support.inprocess import run, started
from tests.support.states import committed, new_queue

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECRET = b'{"card":"4111-SECRET"}'  # a payload no error may quote


def ref(first_seq: int, count: int, *, taken: int = 0, priority: int = 0,
        run_at_ms: int = NOW, salt: str = "0123abcd") -> SegmentRef:
    return SegmentRef(segment_key("q", segment_name(first_seq, salt)), f'"etag-{first_seq}"',
                      first_seq, count, priority, run_at_ms, taken)


REFS = [ref(4, 100, taken=10), ref(104, 50, priority=5, run_at_ms=NOW + 60_000)]


def with_refs(refs: list[SegmentRef] = REFS, enqueued: int = 153) -> bytes:
    """The bytes of a queue of three inline jobs (seqs 1-3) and ``refs``, as if
    the segments' seqs were handed out: ``counters.enqueued`` is ``enqueued``."""
    state = new_queue(NOW)
    T.apply(state, PushPayloads((SECRET, b"2", b"3")), NOW)
    state = committed(state, NOW)
    state.segment_refs = list(refs)
    state.counters.enqueued = enqueued
    return codec.encode(state)


def test_an_object_with_segment_refs_decodes_and_reencodes_byte_identically() -> None:
    data = with_refs()
    state = decode_state(data)
    assert state.segment_refs == REFS
    assert codec.encode(state) == data
    assert codec.encode(decode_state(codec.encode(state))) == data
    assert orjson.loads(codec.encode_full(state)) == orjson.loads(data)


def test_the_refs_are_on_lines_of_their_own_between_the_header_and_the_jobs() -> None:
    data = with_refs()
    lines = data.split(b"\n")
    at = lines.index(b'"segments":[')
    assert lines[at - 1].startswith(b'{"format":"osqueue","version":5,')
    assert [orjson.loads(line.rstrip(b",")) for line in lines[at + 1:at + 3]] == \
        [ref_to_json(r) for r in REFS]
    assert lines[at + 3:at + 7] == [b"],", b'"claims":[],', b'"spills":[],', b'"jobs":[']
    assert orjson.loads(lines[at + 1].rstrip(b",")) == {
        "key": "q/segments/seg-0000000004-0123abcd.jsonl", "etag": '"etag-4"',
        "first_seq": 4, "count": 100, "priority": 0, "run_at": "2026-01-01T00:00:00.000Z",
        "taken": 10}


def test_a_ref_costs_its_line_in_the_size_estimate_not_its_jobs() -> None:
    plain = decode_state(with_refs([]))
    assert decode_state(with_refs()).size_estimate() == \
        plain.size_estimate() + 2 * SEGMENT_REF_BYTES
    assert 2 * SEGMENT_REF_BYTES >= len(with_refs()) - len(with_refs([], 153)) > 0


def _refused(raw: dict[str, Any], match: str) -> str:
    with pytest.raises(CorruptState, match=match) as info:
        decode_state(orjson.dumps(raw))
    message = str(info.value)
    assert "SECRET" not in message and "4111" not in message
    return message


def _raw(refs: list[SegmentRef] = REFS, enqueued: int = 153) -> dict[str, Any]:
    raw: dict[str, Any] = orjson.loads(with_refs(refs, enqueued))
    return raw


@pytest.mark.parametrize(("segments", "match"), [
    ({"key": "x"}, r"segments must be a list"),
    ([{**ref_to_json(REFS[0]), "extra": 1}], r"segments\[0\]: segment reference fields"),
    ([ref_to_json(REFS[0]), {**ref_to_json(REFS[1]), "taken": 51}],
     r"segments\[1\]: segment .* taken"),
    ([ref_to_json(REFS[0]), {**ref_to_json(REFS[1]), "key": "q/x.jsonl"}],
     r"segments\[1\]: .* is not a segment key"),
])
def test_a_malformed_segments_field_is_refused_naming_it(segments: Any, match: str) -> None:
    _refused({**_raw(), "segments": segments}, match)


def test_refs_out_of_order_or_overlapping_are_refused() -> None:
    a, b = REFS
    _refused(_raw([b, a]), r"segments\[1\] \(q/segments/seg-0000000004-0123abcd\.jsonl\) "
                           r"starts at seq 4.*ascending first_seq with disjoint")
    _refused(_raw([a, ref(103, 10, salt="00000001")]), r"segments\[1\] .* starts at seq 103")
    _refused(_raw([a, ref(4, 10, salt="00000001")]), r"segments\[1\] .* starts at seq 4")
    assert decode_state(with_refs([a, ref(104, 10, salt="00000001")], 113)).segment_refs


def test_refs_beyond_the_enqueued_counter_are_refused() -> None:
    _refused(_raw(REFS, 152), r"segments\[1\] .* holds seqs up to 153 but counters\.enqueued "
                              r"is 152")
    _refused(_raw([ref(4, 100)], 102), r"segments\[0\] .* up to 103")


def test_a_head_job_in_a_segments_untaken_part_is_refused() -> None:
    """Seqs 1-3 are inline: a ref over seq 3 must have taken it already (a job
    taken from a segment moves into the head)."""
    message = _refused(_raw([ref(2, 5, taken=1)], 153),
                       r"segments\[0\] .* still holds seq 3 \(taken 1 of 5\)")
    assert "jobs list" in message
    _refused(_raw([ref(1, 3, taken=0)], 153), r"still holds seq 1")
    _refused(_raw([ref(3, 1, taken=0)], 153), r"still holds seq 3")
    state = decode_state(with_refs([ref(2, 5, taken=2)]))  # seqs 2 and 3 taken: fine
    assert state.segment_refs == [ref(2, 5, taken=2)]


def test_stats_count_the_segments_pending_jobs_and_their_due_times() -> None:
    """Seqs 1-3 inline and pending (due at NOW); 90 left of the first segment (due
    at NOW, created when due), 50 of the second (due a minute later)."""
    state = decode_state(with_refs())
    plain = decode_state(with_refs([]))
    now = NOW + 1_000
    got, before = stats(state, now), stats(plain, now)
    assert before["counts"]["pending"] == 3 and before["total"] == 3
    assert got["counts"] == {**before["counts"], "pending": 3 + 90 + 50}
    assert got["total"] == 3 + 90 + 50
    assert got["oldest_pending_age_s"] == before["oldest_pending_age_s"] == 1.0
    assert before["next_delayed_run_at"] is None
    assert got["next_delayed_run_at"] == "2026-01-01T00:01:00.000Z"
    assert got["approx_state_bytes"] == before["approx_state_bytes"] + 2 * SEGMENT_REF_BYTES
    assert state.count_by_status()["pending"] == 143


def test_stats_age_comes_from_a_segment_due_before_every_head_job() -> None:
    state = decode_state(with_refs([ref(4, 100, run_at_ms=NOW - 30_000)]))
    assert stats(state, NOW)["oldest_pending_age_s"] == 30.0
    state = decode_state(with_refs([ref(4, 100, taken=100, run_at_ms=NOW - 30_000)]))
    assert stats(state, NOW)["oldest_pending_age_s"] == 0.0  # exhausted: none left


def test_the_next_wakeup_is_when_a_delayed_segment_becomes_due() -> None:
    state = decode_state(with_refs())
    assert next_wakeup_ms(decode_state(with_refs([])), NOW) is None
    assert next_wakeup_ms(state, NOW) == NOW + 60_000
    assert next_wakeup_ms(state, NOW + 60_000) is None  # due now: no wake-up needed
    exhausted = decode_state(with_refs([REFS[0], ref(104, 50, taken=50, run_at_ms=NOW + 1)]))
    assert next_wakeup_ms(exhausted, NOW) is None


def test_a_broker_refuses_an_object_whose_segments_are_missing(tmp_path: Path) -> None:
    """An object that references segments the store does not hold (at their
    etags) is refused by naming the object, at the first batch after the load,
    before any op applies: never served as if its segment jobs were not there,
    and the object is left as it was."""
    store = FileStore(tmp_path)
    data = with_refs()
    store.create_if_absent(paths.state_key("q"), data)
    missing = decode_state(data).segment_refs[0].key

    async def main() -> None:
        broker = await started(store)
        try:
            with pytest.raises(SegmentMissing, match=missing):
                await broker.push("q", [NewJob(b"x")])
        finally:
            await broker.stop(drain_s=2)

    run(main())
    assert store.read(paths.state_key("q")).data == data
