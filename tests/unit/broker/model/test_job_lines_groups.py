"""A grouped job's line: ``"group"`` right before ``"payload"`` in every shape
(pending, claimed, completed, dead, cancelled), the same bytes as its stored
dict, the byte splices of claim and completion untouched by what a group
name holds; archive lines carry the group in the same place."""

from __future__ import annotations

import orjson
import pytest

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import Job
from broker.model.job_lines import archive_line, job_line, stored_dict
from broker.model.ops import Cancel, Claim, Complete, CompleteItem, Fail, FailItem, NewJob, Push
from broker.model.state import QueueState
from tests.support.states import new_queue

T0 = 1_767_225_600_000
# A name that spells the fields the splices look for, and one that needs escaping.
NASTY = '","status":"pending","attempts":0,"payload":1,"claim":7}'
NAMES = ["tenant-a", NASTY, 'q"\\é\u2028']


def _line_dict(line: bytes) -> dict[str, object]:
    assert line.startswith(b",\n")
    return orjson.loads(line[2:])


def _keys(line: bytes) -> list[str]:
    return list(_line_dict(line))


def _pushed(group: str | None, n: int = 1, **options: object) -> QueueState:
    state = new_queue(T0)
    T.apply(state, Push(tuple(NewJob(b'{"i":%d}' % i, group=group, **options)  # type: ignore[arg-type]
                              for i in range(n))), T0)
    return state


def _stamped(state: QueueState, at: int) -> None:
    codec.stamp(state, "w", T0 + at, f"c-{at}")
    codec.encode(state)


@pytest.mark.parametrize("group", NAMES)
def test_every_shape_of_a_grouped_line_is_its_stored_dict_with_the_group_before_the_payload(
        group: str) -> None:
    state = _pushed(group, 4)
    _stamped(state, 0)
    jobs = [state.jobs[seq] for seq in (1, 2, 3, 4)]

    def check() -> None:
        for job in jobs:
            line = job_line(job)
            assert line == b",\n" + orjson.dumps(stored_dict(job)), job
            keys = _keys(line)
            assert keys[keys.index("created_at") + 1:keys.index("created_at") + 3] == \
                ["group", "payload"]
            assert _line_dict(line)["group"] == group

    check()  # pending
    claimed = T.apply(state, Claim("w", 4, 30_000), T0 + 1).jobs
    _stamped(state, 1)
    assert [job.status for job in jobs] == ["claimed"] * 4
    assert [_line_dict(job_line(j))["status"] for j in jobs] == ["claimed"] * 4
    check()  # claimed
    tokens = [job.token for job in claimed]
    T.apply(state, Complete((CompleteItem(tokens[0], b'"r"'),)), T0 + 2)
    T.apply(state, Fail((FailItem(tokens[1], "boom", 0),)), T0 + 2)
    T.apply(state, Cancel((jobs[2].id,)), T0 + 2)
    _stamped(state, 2)  # (the completion's line spliced from the claimed one)
    assert jobs[0].status == "completed" and jobs[1].attempts == 1
    check()  # completed, pending again with an error, claimed with a cancel mark


def test_a_group_never_reaches_an_ungrouped_line() -> None:
    state = _pushed(None, 1, priority=3)
    job = state.jobs[1]
    assert job.group is None and "group" not in _keys(job_line(job))


@pytest.mark.parametrize("group", NAMES)
def test_an_archive_line_carries_the_group_before_the_payload(group: str) -> None:
    state = _pushed(group, 2)
    tokens = [j.token for j in T.apply(state, Claim("w", 2, 30_000), T0 + 1).jobs]
    T.apply(state, Complete((CompleteItem(tokens[0], b"1"),)), T0 + 2)
    T.apply(state, Cancel((state.jobs[2].id,)), T0 + 2)
    T.apply(state, Fail((FailItem(tokens[1], "x", 0),)), T0 + 3)  # its cancel ends it
    _stamped(state, 3)
    for seq in (1, 2):
        job = state.jobs[seq]
        assert job.status in ("completed", "cancelled")
        line = archive_line(job)
        record = orjson.loads(line)
        keys = list(record)
        assert record["group"] == group and keys.index("group") + 1 == keys.index("payload")


def test_an_ungrouped_archive_line_is_as_before() -> None:
    job = Job(7, b"1", "completed", 0, T0, 1, 3, T0)
    job.lease_token, job.lease_worker = "j0000000007.1", "w"
    job.done_ms, job.done_seq, job.done_commit = T0, 2, "c-2"
    line = archive_line(job)
    assert b'"group"' not in line
    assert line.startswith(b'{"id":"j0000000007","seq":7,"status":"completed","priority":0,'
                           b'"run_at":"2026-01-01T00:00:00.000Z","attempts":1,"max_attempts":3,'
                           b'"created_at":"2026-01-01T00:00:00.000Z","payload":1,"worker":"w",')
