"""A repeated keyed claim over a head converted from version 4, where the
claim's jobs became several claim records (their leases differed: one job was
heartbeaten apart): the repeat hands back every job the claim still holds, not
only those of the record its first fence falls in."""

from __future__ import annotations

import orjson

from broker import timefmt
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import CLAIMED, COMPLETED
from broker.model.ops import Claim, Complete, CompleteItem
from tests.support.states import committed, queue_of, read_back

NOW = 1_767_225_600_000


def _v4_head_of_a_split_claim() -> bytes:
    """A version-4 head: a keyed claim of 3 jobs (fences 1..3), job 2's lease
    renewed 5 s after the others' (so its expiry and heartbeat differ)."""
    state = queue_of(3, NOW)
    T.apply(state, Claim("w", 3, 60_000, "k-1"), NOW)
    codec.stamp(state, "w", NOW, "c-1")
    raw = orjson.loads(codec.encode(state))
    raw["version"] = 4
    del raw["claims"], raw["spills"]
    for job in raw["jobs"]:
        if job["status"] == "claimed":
            fence = job.pop("claim") + job["seq"] - 1
            late = 5_000 if job["seq"] == 2 else 0
            job["lease"] = {"token": f"{job['id']}.{fence}", "worker": "w", "lease_s": 60.0,
                            "expires_at": timefmt.fmt(NOW + 60_000 + late),
                            "heartbeat_at": timefmt.fmt(NOW + late)}
    return orjson.dumps(raw)


def test_a_repeated_claim_hands_back_its_jobs_from_every_record_they_became() -> None:
    state = read_back(_v4_head_of_a_split_claim())
    assert [r.seqs for r in state.claim_records.values()] == [[1], [2], [3]]
    again = T.apply(state, Claim("w", 3, 60_000, "k-1"), NOW + 6_000)
    assert [j.id for j in again.jobs] == ["j0000000001", "j0000000002", "j0000000003"]
    # The repeat claimed nothing new, and its tokens hold the jobs.
    state = committed(state, NOW + 6_000)
    assert state.counters.fence == 3
    assert [j.status for j in state.jobs.values()] == [CLAIMED] * 3
    done = T.apply(state, Complete(tuple(CompleteItem(j.token) for j in again.jobs)), NOW + 7_000)
    assert [i.ok for i in done.items] == [True, True, True]
    state = committed(state, NOW + 7_000, "c-2")
    assert [j.status for j in state.jobs.values()] == [COMPLETED] * 3
    assert state.claim_records == {}


def test_a_repeated_claim_whose_first_job_settled_before_the_upgrade_hands_back_the_rest() -> None:
    raw = orjson.loads(_v4_head_of_a_split_claim())
    first = raw["jobs"][0]
    first["status"] = "pending"  # released before the upgrade: fence 1 no longer held
    first["attempts"] = 0
    del first["lease"]
    state = read_back(orjson.dumps(raw))
    again = T.apply(state, Claim("w", 3, 60_000, "k-1"), NOW + 6_000)
    assert [j.id for j in again.jobs] == ["j0000000002", "j0000000003"]
    state = committed(state, NOW + 6_000)
    assert [j.status for j in state.jobs.values()][1:] == [CLAIMED] * 2
    assert sorted(s for r in state.claim_records.values() for s in r.seqs) == [2, 3]
