"""broker.model.held.done_lines against the slow path as the model: for random
segments (version 1 as old brokers wrote them, version 2 as brokers write them
now), payloads (escapes, unicode, big numbers, look-alike field names),
priorities, due and creation times, max_attempts, workers, results and done
positions, the spliced archive lines are byte for byte
``archive_line(done_job(...))``, one per done position, in position order."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model.claim_records import ClaimRecord, Done
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.held import done_job, done_lines
from broker.model.job_lines import archive_line
from broker.model.state import SegmentRef
from broker.paths import segment_key, segment_name
from tests.support.segment_v1 import encode_segment_v1
from tests.support.tiers import examples

T0 = 1_767_225_600_123
TEN_YEARS_MS = 10 * 365 * 86_400_000

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=12)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids,
                                                              max_size=3),
    max_leaves=6)
_tricky = st.sampled_from([
    b'"\\",\\"payload\\":1"', b'{"status":"pending","attempts":0,"max_attempts":3}',
    b'"\\u00e9\\ud83d\\ude00"', b'{"key":"k","group":"g"}', b'123456789012345678901234567890',
    b'"}\\n{"', b'[ 1 , 2 ]', b'{"a" : "b"}', b'-0.0e+10'])
_payload = st.one_of(_json.map(orjson.dumps), _tricky)
_result = st.none() | _payload


@settings(max_examples=examples(300), deadline=None)
@given(version=st.sampled_from([1, 2]), first=st.integers(1, 10**11),
       priority=st.integers(-1000, 1000), run_at=st.integers(0, T0 + TEN_YEARS_MS),
       created=st.integers(0, T0 + TEN_YEARS_MS), max_attempts=st.integers(1, 1000),
       payloads=st.lists(_payload, min_size=1, max_size=8),
       worker=st.text(max_size=10), fence=st.integers(1, 10**9),
       data=st.data())
def test_done_lines_are_the_slow_paths_archive_lines(
        version: int, first: int, priority: int, run_at: int, created: int,
        max_attempts: int, payloads: list[bytes], worker: str, fence: int,
        data: st.DataObject) -> None:
    encode = encode_segment_v1 if version == 1 else encode_segment
    blob = encode("q", first, priority, run_at, payloads, max_attempts=max_attempts,
                  created_ms=created)
    ref = SegmentRef(segment_key("q", segment_name(first, "0123abcd")), '"e1"', first,
                     len(payloads), priority, run_at)
    lines = segment_lines(blob, ref)
    lead = data.draw(st.integers(0, 3))
    record = ClaimRecord(fence, worker, 60_000, T0 + 60_000, T0,
                         seqs=[*range(first - lead - 1, first - 1),
                               *range(first, first + len(payloads))])
    record.segs = [(lead, len(payloads), ref.key, 0)]
    pos = sorted(data.draw(st.sets(st.integers(lead, lead + len(payloads) - 1), min_size=1)))
    results = [data.draw(_result) for _ in pos]
    entry = Done(data.draw(st.integers(1, 10**12)), "c-8f3a", data.draw(st.integers(0, T0 * 2)),
                 pos, results)
    got = [(ref, lines[p - lead]) for p in pos]
    made = done_lines(record, entry, got)
    want = [archive_line(done_job(record, entry, i, r, line)) for i, (r, line) in enumerate(got)]
    assert made.lines == want
    assert made.seqs == [first + p - lead for p in pos]
