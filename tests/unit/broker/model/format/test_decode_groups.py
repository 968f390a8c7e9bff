"""Reading format version 6: a job's group is read and checked (a bad one is
``CorruptState``, never overwritten); a group in a version-5 object is
malformed; a broker that understands up to version 5 refuses a version-6
object as newer (``NewerState``) instead of dropping its groups."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker.errors import CorruptState, NewerState
from broker.model.format import decode
from broker.model.format.decode import decode_state

GOLDEN_V6 = Path(__file__).resolve().parents[4] / "fixtures" / "golden_v6_queue.json"
GOOD = b'"group":"tenant-a"'


def test_the_v6_golden_loads_with_its_groups() -> None:
    state = decode_state(GOLDEN_V6.read_bytes())
    assert [state.jobs[seq].group for seq in sorted(state.jobs)] == \
        [None, None, "tenant-a", 'b"\u00e9', "tenant-a", None]
    assert state.grouped and sorted(state.grouped) == [3, 4, 5]


@pytest.mark.parametrize("bad", [b'"group":""', b'"group":"a\\u0000"', b'"group":"\\u007f"',
                                 b'"group":"t\\nx"', b'"group":5', b'"group":["a"]',
                                 b'"group":"' + b"x" * 129 + b'"'])
def test_a_bad_group_in_a_v6_object_is_corrupt(bad: bytes) -> None:
    data = GOLDEN_V6.read_bytes()
    assert data.count(GOOD) == 2
    with pytest.raises(CorruptState, match=r"job 'j0000000003'.*group must be a string of "
                                           r"1\.\.128 characters"):
        decode_state(data.replace(GOOD, bad, 1))


def test_a_null_group_reads_as_none() -> None:
    state = decode_state(GOLDEN_V6.read_bytes().replace(GOOD, b'"group":null', 1))
    assert state.jobs[3].group is None


def test_a_group_in_a_version_5_object_is_corrupt() -> None:
    data = GOLDEN_V6.read_bytes().replace(b'"version":6', b'"version":5', 1)
    with pytest.raises(CorruptState, match="groups came in format version 6"):
        decode_state(data)


def test_a_broker_that_reads_up_to_version_5_refuses_a_v6_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode, "VERSION", 5)
    with pytest.raises(NewerState, match="format version 6; this osqueue understands up to 5"):
        decode_state(GOLDEN_V6.read_bytes())


def test_an_edited_grouped_line_reads_as_its_json() -> None:
    """A grouped line laid out otherwise (fields reordered by a hand edit) is
    read from its JSON, the group kept."""
    data = GOLDEN_V6.read_bytes()
    start = data.index(b'{"id":"j0000000003"')
    end = data.index(b"\n", start)
    line = data[start:end].rstrip(b",")
    record = orjson.loads(line)
    edited = orjson.dumps({"group": record.pop("group"), **record})
    state = decode_state(data[:start] + edited + data[start + len(line):])
    assert state.jobs[3].group == "tenant-a" and state.jobs[3].payload == b'{"t":"a"}'
