"""Format version 6 (job groups), written only when used: a head whose jobs
have no group is version 5 byte for byte; a grouped job makes it version 6
until the last grouped job has left the head. A fixed sequence of grouped
operations writes ``golden_v6_queue.json`` (regenerated only when the format
changes on purpose: ``_regenerate``)."""

from __future__ import annotations

from pathlib import Path

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    DropArchived,
    NewJob,
    Push,
    PushPayloads,
    TakeOver,
)
from broker.model.state import QueueState
from tests.support.states import new_queue, read_back

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures"
GOLDEN_V6 = FIXTURES / "golden_v6_queue.json"
T0 = 1_767_225_600_000


def _version(data: bytes) -> bytes:
    return data[:40].split(b",")[1]


def _commit(state: QueueState, at: int) -> bytes:
    codec.stamp(state, "b-writer", T0 + at, f"c-{at:06d}")
    return codec.encode(state)


def _grouped_run() -> tuple[QueueState, list[bytes]]:
    state = new_queue(T0)
    steps = []
    ops = [
        TakeOver("b-1", "http://10.0.0.4:8765", 30_000),
        PushPayloads((b"1", b"2")),
        Push((NewJob(b'{"t":"a"}', group="tenant-a"), NewJob(b'"b"', priority=2, group='b"\u00e9'),
              NewJob(b"3", key="k-1", group="tenant-a"), NewJob(b"4"))),
        Claim("w1", 3, 10_000),
    ]
    for at, op in enumerate(ops):
        T.apply(state, op, T0 + at)
        steps.append(_commit(state, at))
    return state, steps


def _regenerate() -> None:  # pragma: no cover (by hand, when the format changes on purpose)
    GOLDEN_V6.write_bytes(_grouped_run()[1][-1])


def test_a_head_without_groups_is_written_as_version_5() -> None:
    _, steps = _grouped_run()
    assert [_version(data) for data in steps] == [b'"version":5', b'"version":5',
                                                  b'"version":6', b'"version":6']


def test_the_grouped_sequence_writes_the_v6_golden_and_reads_back_to_it() -> None:
    _, steps = _grouped_run()
    assert steps[-1] == GOLDEN_V6.read_bytes()
    again = read_back(steps[-1])
    assert codec.encode(again) == steps[-1]
    assert {seq: again.jobs[seq].group for seq in again.jobs} == \
        {1: None, 2: None, 3: "tenant-a", 4: 'b"\u00e9', 5: "tenant-a", 6: None}


def test_the_head_returns_to_version_5_once_its_last_grouped_job_left() -> None:
    state, _ = _grouped_run()
    # claim order: priority first (job 4, grouped), then the groups in turn: 1 (no
    # group), 3 (tenant-a)
    assert {job.seq for job in state.jobs.values() if job.status == "claimed"} == {4, 1, 3}
    state2 = read_back(_commit(state, 10))  # (the heap rebuilt from the lines)
    for s in (state, state2):
        assert [j.seq for j in s.jobs.values() if j.group is not None and
                j.status == "pending"] == [5]
        T.apply(s, Claim("w2", 10, 10_000), T0 + 20)
        tokens = [j.lease_token for j in s.jobs.values() if j.status == "claimed"]
        assert s.tagger is not None and len(tokens) == 6
        T.apply(s, Complete(tuple(CompleteItem(s.tagger.tag(t), None)
                                  for t in tokens if t is not None)), T0 + 21)
        data = _commit(s, 21)
        assert _version(data) == b'"version":6'  # completed jobs await their archive
        T.apply(s, DropArchived((s.seq,)), T0 + 22)
        data = _commit(s, 22)
        assert not s.jobs.entries
        assert _version(data) == b'"version":5'
        assert _version(codec.encode(read_back(data))) == b'"version":5'
