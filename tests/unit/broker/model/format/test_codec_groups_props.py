"""The version a head is written as (:func:`broker.model.format.codec.version_of`)
under any run of operations: 6 exactly while some job in the head has a group,
else 5. ``version_of`` answers from a derived heap of grouped seqs (kept by the
pushes, rebuilt by decode, pruned lazily) instead of walking the jobs, so this
checks the heap against a recount of the jobs after every step, on the state
the operations changed and on the state read back from its bytes."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import COMPLETED, DEAD, PENDING
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    DropArchived,
    Fail,
    FailItem,
    NewJob,
    Purge,
    Push,
    PushPayloads,
)
from broker.model.state import UNGROUPED_VERSION, VERSION, QueueState
from tests.support.states import new_queue, read_back

T0 = 1_767_225_600_000

_GROUP = st.one_of(st.none(), st.sampled_from(["a", "b"]))
_STEP = st.one_of(
    st.tuples(st.just("push"), st.lists(_GROUP, min_size=1, max_size=4)),
    st.tuples(st.just("bulk"), st.integers(1, 4)),
    st.tuples(st.just("claim"), st.integers(1, 5)),
    st.tuples(st.just("complete"), st.integers(1, 5)),
    st.tuples(st.just("fail"), st.integers(1, 3)),
    st.tuples(st.just("purge"), st.just(0)),
    st.tuples(st.just("archive"), st.just(0)),
    st.tuples(st.just("reload"), st.just(0)),
)


def _recount(state: QueueState) -> int:
    grouped = any(job.group is not None for job in state.jobs.values())
    return VERSION if grouped else UNGROUPED_VERSION


def _written_version(data: bytes) -> int:
    assert data.startswith(b'{"format":"osqueue","version":')
    return int(data[30:].split(b",", 1)[0])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEP, min_size=1, max_size=25))
def test_the_written_version_follows_whether_a_job_in_the_head_has_a_group(
        steps: list[tuple[str, Any]]) -> None:
    state = new_queue(T0)
    held: list[str] = []
    for at, (kind, arg) in enumerate(steps, start=1):
        now = T0 + at * 1000
        if kind == "push":
            T.apply(state, Push(tuple(NewJob(b'"x"', group=g) for g in arg)), now)
        elif kind == "bulk":
            T.apply(state, PushPayloads(tuple(b"%d" % i for i in range(arg))), now)
        elif kind == "claim":
            held += [job.token for job in T.apply(state, Claim("w", arg, 60_000), now).jobs]
        elif kind == "complete":
            done, held = held[:arg], held[arg:]
            T.apply(state, Complete(tuple(CompleteItem(t) for t in done)), now)
        elif kind == "fail":
            failed, held = held[:arg], held[arg:]
            T.apply(state, Fail(tuple(FailItem(t, "boom", 0) for t in failed)), now)
        elif kind == "purge":
            T.apply(state, Purge((PENDING, DEAD)), now)
        elif kind == "archive":
            commits = {job.done_seq for job in state.jobs.values()
                       if job.status == COMPLETED and job.done_seq is not None}
            if commits:
                T.apply(state, DropArchived(tuple(sorted(commits))), now)
        codec.stamp(state, "b-writer", now, f"c-{at:06d}")
        data = codec.encode(state)
        assert codec.version_of(state) == _written_version(data) == _recount(state)
        if kind == "reload":  # the heap rebuilt from the lines the head holds
            state = read_back(data)
            assert codec.version_of(state) == _recount(state)
            assert _written_version(codec.encode(state)) == _recount(state)
