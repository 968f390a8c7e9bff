"""A claimed job's lease in its own fields (broker.model.job.Job): the lease value,
the fields and the job's cached line agree through heartbeats, completes, fails,
reclaims, takeovers and re-reads, and objects written before the lease moved
into the fields reload and re-encode."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker.http import parsers
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.job import CLAIMED, COMPLETED, PENDING, Job, Lease
from broker.model.job_lines import job_line, stored_dict
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    CompleteItems,
    Fail,
    FailItem,
    Heartbeat,
    PushPayloads,
    Reclaim,
    Redrive,
    TakeOver,
)
from broker.model.state import QueueState
from broker.model.tokens import stored_part
from tests.support.states import committed, new_queue, queue_of, tagged

NOW = 1_767_225_600_000
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def _lines_agree(state: QueueState) -> None:
    """Every job's (cached) line is the line a fresh encode of its fields makes."""
    for job in state.jobs.values():
        cached = job_line(job)
        job._enc = None
        fresh = job_line(job)
        assert cached == fresh, (job, cached, fresh)
        assert orjson.loads(fresh.lstrip(b",\n")) == \
            orjson.loads(orjson.dumps(stored_dict(job))), job


def test_heartbeat_after_an_encode_renews_the_whole_claim_in_the_object() -> None:
    """A heartbeat of one token after the claimed lines were cached (encoded)
    renews its claim's lease, in the claim's record: the re-read object has the
    heartbeated lease for every job of that claim and the first lease for the
    job of another claim, and a reclaim takes back only that one."""
    state = queue_of(3, NOW)
    jobs = T.apply(state, Claim("w", 2, 10_000), NOW).jobs
    other = T.apply(state, Claim("w", 1, 10_000), NOW).jobs
    committed(state, NOW)  # every claimed line is now cached
    lines = {seq: job_line(job) for seq, job in state.jobs.items()}
    T.apply(state, Heartbeat((jobs[1].token,), 50_000), NOW + 7)
    _lines_agree(state)
    assert {seq: job_line(job) for seq, job in state.jobs.items()} == lines  # (the record's)
    back = committed(state, NOW + 8, "c-2")
    for held, seq in zip(jobs, (1, 2), strict=True):
        assert back.jobs[seq].lease == Lease(stored_part(held.token), "w", 50_000,
                                             NOW + 50_007, NOW + 7)
    assert back.jobs[3].lease == Lease(stored_part(other[0].token), "w", 10_000, NOW + 10_000,
                                       NOW)
    assert [(r.fence, r.n, r.expires_ms) for r in back.claim_records.values()] == \
        [(1, 2, NOW + 50_007), (3, 1, NOW + 10_000)]
    # and the reloaded queue reclaims the other claim's job only
    reclaimed = T.apply(back, Reclaim(), NOW + 10_001).ids
    assert sorted(reclaimed) == ["j0000000003"]
    assert back.jobs[1].status == back.jobs[2].status == CLAIMED


def test_complete_after_a_heartbeat_splices_the_heartbeated_line() -> None:
    """A complete of a job whose heartbeated line is cached writes the heartbeated
    lease, the result and the completing commit; the re-read jobs equal the
    state's."""
    state = queue_of(2, NOW)
    jobs = T.apply(state, Claim("w", 2, 10_000), NOW).jobs
    committed(state, NOW)
    T.apply(state, Heartbeat((jobs[0].token,), 40_000), NOW + 3)
    committed(state, NOW + 3, "c-2")  # heartbeated line cached
    T.apply(state, Complete(parsers.parse_complete(
        {"items": [{"token": jobs[0].token, "result": 1}]})), NOW + 5)
    back = committed(state, NOW + 5, "c-3")
    _lines_agree(state)
    done = back.jobs[1]
    assert done.status == COMPLETED and done.result == b"1" and done.done_commit == "c-3"
    assert done.lease == Lease(stored_part(jobs[0].token), "w", 40_000, NOW + 40_003, NOW + 3)
    assert back.jobs == state.jobs  # Job equality through the lease property


def test_takeover_of_a_decoded_object_gives_fresh_leases_in_the_written_bytes() -> None:
    """A takeover of a re-read object an hour later gives every claimed job a fresh
    lease on the new clock, in its fields and its written line (nothing is
    reclaimed before that lease runs out), keeping each lease's token and
    heartbeat time; the jobs still complete under their tokens."""
    state = queue_of(2, NOW)
    jobs = T.apply(state, Claim("w", 2, 10_000), NOW).jobs
    back = committed(state, NOW)
    later = NOW + 3_600_000  # an hour: every old lease has run out on the old clock
    T.apply(back, TakeOver("b-2", "http://b", 30_000), later)
    _lines_agree(back)
    assert T.apply(back, Reclaim(), later + 9_999).ids == []  # fresh 10 s leases
    again = committed(back, later, "c-2")
    for held, seq in zip(jobs, (1, 2), strict=True):
        assert again.jobs[seq].lease == Lease(stored_part(held.token), "w", 10_000,
                                              later + 10_000, NOW)
    # still completable under the same tokens after the takeover
    answers = T.apply(again, Complete(CompleteItems.of(
        [CompleteItem(j.token, None) for j in jobs])), later + 1).items
    assert [a.ok for a in answers] == [True, True]


def test_fail_and_reclaim_clear_the_lease_from_line_and_fields() -> None:
    """A fail and a reclaim clear the lease from the fields and the line; claims
    after them get new tokens and the old ones are stale; once the jobs are dead
    a redrive makes them claimable again as first attempts."""
    state = new_queue(NOW)
    state.settings.max_attempts = 2
    T.apply(state, PushPayloads((b"1", b"2")), NOW)
    jobs = T.apply(state, Claim("w", 2, 10_000), NOW).jobs
    committed(state, NOW)
    T.apply(state, Fail((FailItem(jobs[0].token, "boom", 0),)), NOW + 1)
    T.apply(state, Reclaim(), NOW + 10_000)
    _lines_agree(state)
    for job in state.jobs.values():
        assert job.status == PENDING and job.lease is None and job.lease_token is None
        assert "lease" not in orjson.loads(job_line(job).lstrip(b",\n"))
    back = committed(state, NOW + 10_000, "c-2")
    again = T.apply(back, Claim("v", 2, 10_000), NOW + 10_000).jobs
    assert {j.token for j in again}.isdisjoint({j.token for j in jobs})
    stale = T.apply(back, Complete(CompleteItems.of(
        [CompleteItem(j.token) for j in jobs])), NOW + 10_001).items
    assert [a.ok for a in stale] == [False, False]
    # the second attempts dead-letter, redrive makes them claimable with no lease
    T.apply(back, Fail(tuple(FailItem(j.token, "x") for j in again)), NOW + 10_002)
    assert {j.status for j in back.jobs.values()} == {"dead"}
    T.apply(back, Redrive(), NOW + 10_003)
    _lines_agree(back)
    third = T.apply(back, Claim("u", 5, 10_000), NOW + 10_003).jobs
    assert len(third) == 2 and all(j.attempt == 1 for j in third)


@pytest.mark.parametrize("name", ["golden_v3_queue.json", "old_5932e4f_queue.json"])
def test_objects_written_before_the_change_reload_and_reencode(name: str) -> None:
    """Objects written before leases lived in a job's own fields (the golden v3
    fixture, and one written by commit 5932e4f) decode and re-encode to the same
    jobs, and every claimed or completed job's line carries the lease its fields
    hold."""
    data = (FIXTURES / name).read_bytes()
    state = decode_state(data)
    back = decode_state(codec.encode(state))
    assert back.jobs == state.jobs
    for job in state.jobs.values():
        assert (job.lease is not None) == (job.status in (CLAIMED, COMPLETED))
        raw = orjson.loads(job_line(job).lstrip(b",\n"))
        if job.status == CLAIMED:  # (its lease is its claim record's)
            record = state.claim_records[raw["claim"]]
            assert f"{job.id}.{record.fence + record.position(job.seq)}" == job.lease_token
            assert (record.expires_ms, record.worker) == (job.lease_expires_ms, job.lease_worker)
        elif job.lease is not None:
            assert raw["lease"]["token"] == job.lease.token == job.lease_token
            assert raw["lease"]["expires_at"] == job.to_dict()["lease"]["expires_at"]
    _lines_agree(state)


def test_a_lease_value_is_a_copy_and_refuses_mutation() -> None:
    """The lease a job hands out is a read-only value: assigning to it raises, and
    the job's own expiry is unchanged."""
    state = queue_of(1, NOW)
    T.apply(state, Claim("w", 1, 10_000), NOW)
    job = state.jobs[1]
    lease = job.lease
    assert lease is not None
    with pytest.raises(AttributeError):
        lease.expires_ms = 0  # type: ignore[misc]
    assert job.lease_expires_ms == NOW + 10_000


def test_job_equality_and_to_dict_follow_the_lease_fields() -> None:
    """Job equality and to_dict follow the lease fields: two states claimed alike
    are equal until one is heartbeated, and a job's dict shows its lease in the
    API's units (seconds, ISO times)."""
    a, b = queue_of(1, NOW), queue_of(1, NOW)
    T.apply(a, Claim("w", 1, 10_000), NOW)
    T.apply(b, Claim("w", 1, 10_000), NOW)
    assert a.jobs == b.jobs
    T.apply(b, Heartbeat((tagged("j0000000001.1"),), 10_000), NOW + 1)
    assert a.jobs != b.jobs
    job = Job(1, b"1", CLAIMED, 0, NOW, 1, 3, NOW,
              lease=Lease("j0000000001.4", "w", 1000, NOW + 1000, NOW))
    assert job.to_dict()["lease"] == {"token": "j0000000001.4", "worker": "w", "lease_s": 1.0,
                                      "expires_at": "2026-01-01T00:00:01.000Z",
                                      "heartbeat_at": "2026-01-01T00:00:00.000Z"}
