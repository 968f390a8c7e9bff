"""Job.lease_numbers (broker.model.job): the lease's worker, length, expiry and
heartbeat in one read, the claim record's while the job is claimed (through a
heartbeat) and the job's own copy once it left the claim; the completed line
stamp splices from them is the line a fresh encode makes."""

from __future__ import annotations

import orjson

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import Job
from broker.model.job_lines import job_line, stored_dict
from broker.model.ops import Claim, Complete, CompleteItem, Heartbeat
from broker.model.state import QueueState
from tests.support.states import queue_of

NOW = 1_767_225_600_000


def _by_seq(state: QueueState) -> list[Job]:
    return sorted(state.jobs.values(), key=lambda j: j.seq)


def _properties(job: Job) -> tuple[str, int, int, int]:
    return job.lease_worker, job.lease_ms, job.lease_expires_ms, job.lease_heartbeat_ms


def test_a_claimed_job_reads_its_records_lease_through_a_heartbeat() -> None:
    state = queue_of(2, NOW)
    jobs = T.apply(state, Claim("w-a", 2, 10_000), NOW).jobs
    job, other = _by_seq(state)
    assert job.rec is not None
    assert job.lease_numbers() == ("w-a", 10_000, NOW + 10_000, NOW) == _properties(job)
    T.apply(state, Heartbeat((jobs[0].token,), 40_000), NOW + 7)
    assert job.lease_numbers() == ("w-a", 40_000, NOW + 40_007, NOW + 7) == _properties(job)
    assert other.lease_numbers() == job.lease_numbers()  # (one record, both jobs)


def test_a_completed_job_keeps_the_lease_it_left_its_claim_with() -> None:
    state = queue_of(2, NOW)
    jobs = T.apply(state, Claim("w-b", 2, 10_000), NOW).jobs
    T.apply(state, Complete((CompleteItem(jobs[0].token, b"1"),)), NOW + 5)
    done, held = _by_seq(state)
    assert done.rec is None and held.rec is not None
    T.apply(state, Heartbeat((jobs[1].token,), 60_000), NOW + 9)  # (the record moves on)
    assert done.lease_numbers() == ("w-b", 10_000, NOW + 10_000, NOW) == _properties(done)
    assert held.lease_numbers() == ("w-b", 60_000, NOW + 60_009, NOW + 9) == _properties(held)


def test_the_line_stamp_splices_for_a_completion_is_a_fresh_encodes() -> None:
    state = queue_of(1, NOW)
    codec.stamp(state, "w", NOW, "c-1")
    b"".join(codec.encode_parts(state))
    jobs = T.apply(state, Claim("w-c", 1, 20_000), NOW + 1).jobs
    codec.stamp(state, "w", NOW + 1, "c-2")
    b"".join(codec.encode_parts(state))  # (the claimed line cached: stamp splices it)
    T.apply(state, Complete((CompleteItem(jobs[0].token, b"7"),)), NOW + 3)
    codec.stamp(state, "w", NOW + 3, "c-3")
    (job,) = _by_seq(state)
    spliced = job_line(job)
    job._enc = None
    assert spliced == job_line(job)
    assert orjson.loads(spliced.lstrip(b",\n")) == orjson.loads(orjson.dumps(stored_dict(job)))
    assert b"\"w-c\"" in spliced and b"\"c-3\"" in spliced
