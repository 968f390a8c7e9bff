"""broker.model.format.claims_format: claim records with segment parts
(``{"seg": key, "at": runs}``) and done entries, from a golden head
(``tests/fixtures/golden_v5_seg_parts_queue.json``: one segment of 5 jobs, a
claim of 4 held in one record, position 0 completed in commit 2 and awaiting
its archive object). It decodes to those records, and is written back byte
for byte. A broker from before held records (main at 9cb984d: seq parts only)
refuses this head with "upgrade osqueue" (``seg`` parts and ``done`` are both
named in its refusal), so a rollback never serves it half-read."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker.errors import CorruptState
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.job import CLAIMED, COMPLETED

GOLDEN = Path(__file__).resolve().parents[4] / "fixtures" / "golden_v5_seg_parts_queue.json"
KEY = "q/segments/seg-0000000001-0123abcd.jsonl"


def test_the_golden_head_reads_as_records_holding_segment_positions() -> None:
    data = GOLDEN.read_bytes()
    state = decode_state(data)
    [record] = state.claim_records.values()
    assert record.seqs == [1, 2, 3, 4] and record.segs == [(0, 4, KEY, 0)]
    assert [(e.commit_seq, e.commit, e.pos, e.results) for e in record.completions or ()] == [
        (2, "c-x", [0], [b"1"])]
    assert state.seg_names == {KEY: 1} and state.done_commits == {2: [1]}
    assert not state.jobs and state.count_by_status()[CLAIMED] == 3
    assert state.count_by_status()[COMPLETED] == 1
    assert codec.encode(state) == data


@pytest.mark.parametrize(("edit", "named"), [
    (lambda c: c.update(done=[{**c["done"][0], "pos": [2, 1]}]), "not settled"),
    (lambda c: c.update(done=[{**c["done"][0], "results": []}]), "one result a position"),
    (lambda c: c.update(done=[{**c["done"][0], "commit_seq": 9}]), "after this version"),
    (lambda c: c.update(parts=[{"seg": KEY, "at": [1, 4]}]), "has taken only 4"),
    (lambda c: c.update(parts=[{"seg": "q/segments/x", "at": [0, 4]}]), "seg part naming"),
])
def test_records_that_do_not_hold_against_the_segments_are_refused(edit: object,
                                                                   named: str) -> None:
    raw = orjson.loads(GOLDEN.read_bytes())
    edit(raw["claims"][0])  # type: ignore[operator]
    with pytest.raises(CorruptState, match=named):
        decode_state(orjson.dumps(raw))
