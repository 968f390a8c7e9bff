"""Grouped pushes with otherwise default options take the bulk path: each job
stays a line (:func:`broker.model.job_lines.new_grouped_pending_lines`) until
first touched, byte for byte :func:`~broker.model.job_lines.job_line` of the
job the general path would make, and :func:`~broker.model.job_lines.pending_from_line`
reads its group back, so limits, reads and the stored object see it."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import InvalidRequest
from broker.fields import group as check_name
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import PENDING, Job
from broker.model.job_lines import (
    job_line,
    line_group,
    new_grouped_pending_lines,
    pending_from_line,
)
from broker.model.ops import Claim, Complete, CompleteItem, Configure, NewJob, Push
from tests.support.states import committed, new_queue, read_back

T0 = 1_767_225_600_000


def _valid(name: str) -> bool:
    try:
        check_name("group", name)
    except InvalidRequest:
        return False
    return True


GROUPS = st.one_of(st.none(), st.text(min_size=1, max_size=128).filter(_valid),
                   st.sampled_from(['","payload":1', '"group":"x"', 'a\\"b', "é\u2028"]))
PAYLOADS = st.sampled_from([b"1", b'{"a":[1,2]}', b'"s,\\"payload\\":"', b'{"group":"no"}'])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(PAYLOADS, GROUPS), min_size=1, max_size=8), st.integers(1, 10**6),
       st.integers(1, 25))
def test_a_grouped_bulk_line_is_the_general_paths_line_and_reads_back(
        jobs: list[tuple[bytes, str | None]], first: int, max_attempts: int) -> None:
    lines = new_grouped_pending_lines(first, [p for p, _ in jobs], [g for _, g in jobs], T0,
                                      max_attempts)
    for seq, line, (payload, group) in zip(range(first, first + len(jobs)), lines, jobs,
                                           strict=True):
        made = Job(seq, payload, PENDING, 0, T0, 0, max_attempts, T0)
        made.group = group
        assert line == job_line(made)
        read = pending_from_line(seq, line)
        assert (read.group, read.payload, read.run_at_ms, read.max_attempts) == \
            (group, payload, T0, max_attempts)
        assert orjson.loads(line[2:]).get("group") == group == line_group(line)


def test_a_grouped_push_stays_lines_and_its_groups_limit_holds() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_limit": 1}), T0)
    jobs = [NewJob(b"%d" % i, group="ab"[i % 2]) for i in range(6)]
    T.apply(state, Push((*jobs, NewJob(b"9"))), T0)
    assert all(isinstance(e, bytes) for e in state.jobs.entries.values())  # (the bulk path)
    got = T.apply(state, Claim("w", 10, 30_000), T0).jobs
    assert sorted(state.jobs[int(j.id[1:])].group or "-" for j in got) == ["-", "a", "b"]
    assert T.apply(state, Claim("w", 10, 30_000), T0).jobs == []  # (a and b at their limit)
    T.apply(state, Complete(tuple(CompleteItem(j.token) for j in got)), T0)  # (settled by group)
    again = T.apply(state, Claim("w", 10, 30_000), T0).jobs
    assert sorted(state.jobs[int(j.id[1:])].group or "-" for j in again) == ["a", "b"]


def test_a_grouped_bulk_push_survives_encode_and_decode_byte_for_byte() -> None:
    state = new_queue(T0)
    T.apply(state, Push((NewJob(b"1", group="x"), NewJob(b"2"), NewJob(b"3", group='q"'))), T0)
    codec.stamp(state, "w", T0, "c-1")
    data = b"".join(codec.encode_parts(state))
    again = read_back(data)
    assert [again.jobs[s].group for s in (1, 2, 3)] == ["x", None, 'q"']
    assert b"".join(codec.encode_parts(again)) == data


def test_a_bad_group_in_a_bulk_push_refuses_it_all() -> None:
    state = committed(new_queue(T0), T0)
    before = codec.encode(state)
    with pytest.raises(InvalidRequest, match="group must be a string"):
        T.apply(state, Push((NewJob(b"1", group="ok"), NewJob(b"2", group="a\x00"))), T0)
    assert codec.encode(state) == before and len(state.jobs) == 0
