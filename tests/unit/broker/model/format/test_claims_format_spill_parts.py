"""broker.model.format.claims_format: claim records with spill parts
(``{"spill": key, "at": runs, "seq": runs}``) and done entries at them, from a
golden head (``tests/fixtures/golden_v5_spill_parts_queue.json``: one pending
spill object of 5 jobs, a claim of 4 held in one record, position 0 completed
in commit 2 and awaiting its archive object). It decodes to that record, the
ref stays named, and it is written back byte for byte; records that do not
hold against the spill refs are refused, naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker.errors import CorruptState
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.job import CLAIMED, COMPLETED, PENDING

GOLDEN = Path(__file__).resolve().parents[4] / "fixtures" / "golden_v5_spill_parts_queue.json"
KEY = "q/spills/p-000000000042-5d0e91aa.jsonl"


def test_the_golden_head_reads_as_a_record_holding_spill_positions() -> None:
    data = GOLDEN.read_bytes()
    state = decode_state(data)
    [record] = state.claim_records.values()
    assert record.seqs == [1, 2, 3, 4] and record.spills == [(0, 4, KEY, 0)]
    assert not record.segs
    assert [(e.commit_seq, e.commit, e.pos, e.results) for e in record.completions or ()] == [
        (2, "c-x", [0], [b"1"])]
    assert state.seg_names == {KEY: 1} and state.done_commits == {2: [1]}
    counts = state.count_by_status()
    assert not state.jobs and (counts[CLAIMED], counts[COMPLETED], counts[PENDING]) == (3, 1, 1)
    assert codec.encode(state) == data


@pytest.mark.parametrize(("edit", "named"), [
    (lambda c: c["parts"][0].update(seq=[1, 3]), "names 3 seqs for 4 positions"),
    (lambda c: c["parts"][0].update(seq=[1, 2, 1, 2]), "names a job twice"),
    (lambda c: c["parts"][0].update(at=[1, 4]), "beyond its cursor"),
    (lambda c: c["parts"][0].update(spill="q/spills/p-x.jsonl"), "does not reference"),
    (lambda c: c["parts"][0].update(spill=""), "must name a spill object key"),
    (lambda c: c["parts"][0].update(extra=1), "this osqueue reads only"),
    (lambda c: c.update(done=[{**c["done"][0], "pos": [1, 1]}]), "not settled"),
])
def test_records_that_do_not_hold_against_the_spill_refs_are_refused(edit: object,
                                                                     named: str) -> None:
    raw = orjson.loads(GOLDEN.read_bytes())
    edit(raw["claims"][0])  # type: ignore[operator]
    with pytest.raises(CorruptState, match=named):
        decode_state(orjson.dumps(raw))


def test_a_spill_part_naming_a_dead_object_is_refused() -> None:
    raw = orjson.loads(GOLDEN.read_bytes())
    ref = raw["spills"][0]
    for name in ("priority", "taken", "next", "due_min"):
        ref.pop(name, None)
    raw["spills"][0] = {**ref, "kind": "dead", "first": [0, 1]}
    with pytest.raises(CorruptState):
        decode_state(orjson.dumps(raw))


def test_a_job_both_held_at_a_spill_part_and_in_the_jobs_list_is_refused() -> None:
    raw = orjson.loads(GOLDEN.read_bytes())
    raw["jobs"] = [{"id": "j0000000002", "seq": 2, "status": "pending", "priority": 0,
                    "run_at": "2026-01-01T00:00:00.000Z", "attempts": 1, "max_attempts": 3,
                    "created_at": "2026-01-01T00:00:00.000Z", "payload": {"n": 2}}]
    with pytest.raises(CorruptState, match="the jobs list has it too"):
        decode_state(orjson.dumps(raw))
