"""broker.model.format.codec and decode: the head's ``"spills"`` list (references
to spill objects) written, read back, counted, and refused when malformed. Pure."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker.errors import CorruptState
from broker.model import transitions
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.format.spill_refs import redriven, with_out
from broker.model.job import DEAD, PENDING
from broker.model.state import QueueState
from tests.support.spill_objects import T0, spilled, written

FIXTURES = Path(__file__).parents[4] / "fixtures"


def _state_with_spills() -> QueueState:
    state = transitions.new_state(T0)
    (_, dead), = written(DEAD, [spilled(seq) for seq in range(1, 6)])
    (_, pending), = written(PENDING, [spilled(seq) for seq in range(6, 9)])
    state.counters.enqueued = 8
    state.spill_refs = [with_out(dead, 2), pending]
    return state


def test_spill_refs_round_trip_one_line_each_and_re_encode_byte_identical() -> None:
    state = _state_with_spills()
    data = codec.encode(state)
    lines = data.split(b"\n")
    at = lines.index(b'"spills":[')
    assert [orjson.loads(line.rstrip(b","))["kind"] for line in lines[at + 1:at + 3]] == \
        [DEAD, PENDING]
    back = decode_state(data)
    assert back.spill_refs == state.spill_refs
    assert codec.encode(back) == data
    assert orjson.loads(codec.encode_full(back))["spills"] == orjson.loads(data)["spills"]


def test_spilled_jobs_are_counted_from_the_refs() -> None:
    state = decode_state(codec.encode(_state_with_spills()))
    counts = state.count_by_status()
    assert counts[DEAD] == 4  # five, one taken out
    assert counts[PENDING] == 3
    dead = state.spill_refs[0]
    state.spill_refs[0] = redriven(dead, T0 + 1000)
    assert state.count_by_status()[DEAD] == 0
    assert state.count_by_status()[PENDING] == 3 + 4


def test_a_malformed_spill_ref_is_refused_naming_it() -> None:
    raw = orjson.loads(codec.encode(_state_with_spills()))
    key = raw["spills"][1]["key"]
    raw["spills"][1]["count"] = 0
    with pytest.raises(CorruptState, match=r"spills\[1\].*" + key.replace(".", r"\.")):
        decode_state(orjson.dumps(raw))


def test_the_same_spill_object_twice_is_refused() -> None:
    raw = orjson.loads(codec.encode(_state_with_spills()))
    raw["spills"].append(raw["spills"][0])
    with pytest.raises(CorruptState, match=r"spills\[2\] references .* again"):
        decode_state(orjson.dumps(raw))


def test_a_version_5_head_loads_without_spills_and_writes_an_empty_list() -> None:
    state = decode_state((FIXTURES / "golden_v5_queue.json").read_bytes())
    assert state.spill_refs == []
    assert b'\n"spills":[]' in codec.encode(state)
