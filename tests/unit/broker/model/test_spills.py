"""broker.model.spills: the spill rule's pure half: which dead jobs leave the
head (past spill_jobs or spill_bytes; never a payload with a raw line break;
never with spill_jobs 0) and the objects that hold them, read back whole."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.model import spills, transitions
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.format.spill_format import spill_jobs as read_spill
from broker.model.format.spill_refs import new_ref
from broker.model.job import DEAD, PENDING, Job
from broker.model.state import QueueState
from tests.support.spill_objects import ETAG, T0, spill_key

NOW = T0 + 60_000


def _state(dead: int, payload: bytes = b'{"n":1}', pending: int = 2) -> QueueState:
    state = transitions.new_state(T0)
    for seq in range(1, dead + pending + 1):
        status = DEAD if seq <= dead else PENDING
        state.jobs[seq] = Job(seq, payload, status, priority=seq % 3, run_at_ms=T0,
                              attempts=1, max_attempts=1 if status == DEAD else 3,
                              created_ms=T0, key=f"k{seq}" if seq % 2 else None,
                              last_error="ValueError: boom" if status == DEAD else None)
    state.approx_bytes = sum(job.size_estimate() for job in state.jobs.values())
    state.counters.enqueued = dead + pending
    codec.reset_blocks(state)  # (as a decoded state: jobs added by hand)
    return state


def test_spill_jobs_zero_plans_nothing() -> None:
    assert spills.plan_dead(_state(5000), "q", 0, 0, NOW) == spills.NOTHING


def test_under_both_thresholds_the_dead_stay_inline() -> None:
    assert spills.plan_dead(_state(10), "q", 10, 1 << 20, NOW) == spills.NOTHING


def test_past_spill_jobs_every_dead_job_goes_into_one_object_read_back_whole() -> None:
    state = _state(11)
    plan = spills.plan_dead(state, "q", 10, 1 << 20, NOW)
    assert plan.seqs == tuple(range(1, 12))
    (obj,) = plan.objects
    ref = new_ref(obj, spill_key(DEAD), ETAG)
    back = read_spill(obj.data, ref)
    assert sorted(job.seq for job in back) == list(range(1, 12))
    for job in back:
        inline = state.jobs[job.seq]
        assert (job.payload, job.priority, job.attempts, job.max_attempts, job.key,
                job.last_error) == (inline.payload, inline.priority, inline.attempts,
                                    inline.max_attempts, inline.key, inline.last_error)
    assert [(j.priority, j.seq) for j in back] == sorted(
        ((j.priority, j.seq) for j in back), key=lambda p: (-p[0], p[1]))


def test_past_spill_bytes_the_dead_go_though_few() -> None:
    state = _state(3, payload=b'{"blob":"' + b"x" * 400 + b'"}')
    assert spills.plan_dead(state, "q", 1024, 1000, NOW).seqs == (1, 2, 3)
    assert spills.plan_dead(state, "q", 1024, 10_000, NOW) == spills.NOTHING


def test_a_payload_with_a_raw_line_break_stays_inline() -> None:
    state = _state(20)
    state.jobs[4].payload = b'{"a":\n1}'
    plan = spills.plan_dead(state, "q", 10, 1 << 20, NOW)
    assert 4 not in plan.seqs and len(plan.seqs) == 19
    assert sum(obj.count for obj in plan.objects) == 19


def test_a_dead_job_of_a_group_stays_inline() -> None:
    state = _state(20)
    state.jobs[5].group = "g"
    assert 5 not in spills.plan_dead(state, "q", 10, 1 << 20, NOW).seqs


def test_attach_moves_the_jobs_out_and_keeps_the_counts() -> None:
    state = _state(11)
    counts = state.count_by_status()
    size = state.size_estimate()
    plan = spills.plan_dead(state, "q", 10, 1 << 20, NOW)
    (obj,) = plan.objects
    spills.attach(state, plan, [new_ref(obj, spill_key(DEAD), ETAG)], NOW)
    assert state.jobs.count_by_status()[DEAD] == 0
    assert state.count_by_status() == counts
    assert len(state.spill_refs) == 1 and state.size_estimate() < size
    back = decode_state(codec.encode(state))
    assert back.count_by_status() == counts
    assert not any(job.status == DEAD for job in back.jobs.values())


def test_attach_refuses_refs_that_do_not_match_and_changes_nothing() -> None:
    state = _state(11)
    before = codec.encode(state)
    plan = spills.plan_dead(state, "q", 10, 1 << 20, NOW)
    (obj,) = plan.objects
    ref = new_ref(obj, spill_key(DEAD), ETAG)
    with pytest.raises(ValueError, match="do not match"):
        spills.attach(state, plan, [replace(ref, count=ref.count - 1)], NOW)
    del state.jobs[3]
    with pytest.raises(ValueError, match="no longer a dead job"):
        spills.attach(state, plan, [ref], NOW)
    state.jobs[3] = decode_state(before).jobs[3]
    assert codec.encode(state) == before
