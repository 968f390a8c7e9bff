"""Version-4 heads written by main before format version 5 (``e15c3fa``, by
``fixtures/v4_e15c3fa/make.py``: claims one by one and of 2,000, heartbeaten
apart, marked for cancel, untagged fences, paused) load in today's broker, are
written as version 5 with every job as it was (their claimed lines made into
claim records), and serve every job once: the tokens the version-4 claims
answered keep heartbeating and completing through the upgrade."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from broker import paths, wire
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.job import CLAIMED
from broker.model.ops import CompleteItem
from broker.storage import FileStore
from tests.support.faults import Clock
from tests.support.inprocess import archive_lines, run, started, stored
from tests.support.old_formats import as_old_jobs
from tests.support.states import read_back

OLD = Path(__file__).resolve().parents[4] / "fixtures" / "v4_e15c3fa"
NAMES = sorted(p.stem for p in OLD.glob("*.json") if p.stem != "tokens")
TOKENS: dict[str, list[str]] = json.loads((OLD / "tokens.json").read_text())
T0 = 1_767_225_600_000  # the objects' clock (make.py's argument)


def test_every_old_shape_is_there() -> None:
    assert NAMES == ["claim_2000", "empty", "mixed", "one_by_one", "paused", "untagged"]


@pytest.mark.parametrize("name", NAMES)
def test_decode_state_of_a_v4_object_writes_it_as_version_5_with_every_job_as_it_was(
        name: str) -> None:
    """The next bytes are version 5; every job reads back exactly as its version-4
    line spelled it (status, lease with token, worker, expiry, heartbeat, cancel
    mark; the error history its ``last_error`` alone); every other field is
    unchanged; a second round trip is exact."""
    old = (OLD / f"{name}.json").read_bytes()
    data = codec.encode(decode_state(old))
    raw, v4 = wire.loads(data), wire.loads(old)
    assert raw["version"] == 5 and raw["spills"] == []
    assert as_old_jobs([j.to_plain() for j in decode_state(data).jobs.values()]) == v4["jobs"]
    for field in set(v4) - {"version", "jobs"}:
        assert raw[field] == v4[field], field
    assert codec.encode(decode_state(data)) == data
    claimed = [j for j in raw["jobs"] if j["status"] == CLAIMED]
    assert all("lease" not in j and "cancel_requested_at" not in j for j in claimed)
    assert sum(r["n"] for r in raw["claims"]) >= len(claimed)


def test_a_v4_claim_of_2000_jobs_becomes_one_record() -> None:
    raw = wire.loads(codec.encode(decode_state((OLD / "claim_2000.json").read_bytes())))
    [record] = raw["claims"]
    # (the first 48 were completed under fences 1..48: completed lines, leases spelled)
    assert (record["fence"], record["n"], record["parts"]) == (49, 1952,
                                                               [{"seq": [49, 1952]}])
    assert len(codec.encode(decode_state((OLD / "claim_2000.json").read_bytes()))) < \
        len((OLD / "claim_2000.json").read_bytes()) * 0.7  # (no lease a job)


def test_v4_records_merge_only_leases_granted_together() -> None:
    """Consecutive fences with the same worker, length, expiry and heartbeat make one
    record; a heartbeat apart, another worker or a marked job's own record do not
    mix; the marks move into the records."""
    state = decode_state((OLD / "mixed.json").read_bytes())
    records = [(r.fence, r.n, r.worker, sorted(r.cancel)) for r in state.claim_records.values()]
    fences = [f for f, _, _, _ in records]
    assert fences == sorted(fences)
    assert sum(n for _, n, _, _ in records) == len(TOKENS["mixed"])
    assert any(marks for _, _, _, marks in records)
    one = decode_state((OLD / "one_by_one.json").read_bytes())
    assert [(r.fence, r.n) for r in one.claim_records.values()] == [(1, 3)]


@pytest.mark.parametrize("name", NAMES)
def test_a_broker_serves_every_job_of_a_v4_object_once_and_its_tokens_work(
        name: str, tmp_path: Path) -> None:
    """A broker takes the old object over; the tokens the version-4 claims answered
    heartbeat (a marked one answers cancelled) and complete; every other job is
    claimed and completed (dead ones redriven, a paused queue resumed): the store
    then holds a version-5 head with nothing left and an archive with every job
    of the old object exactly once."""
    old = (OLD / f"{name}.json").read_bytes()
    before = read_back(old)
    marked = sum(1 for j in before.jobs.values() if j.status == CLAIMED and j.cancel_ms)
    held = TOKENS.get(name, [])
    store = FileStore(tmp_path)
    store.create_if_absent(paths.state_key("q"), old)
    clock = Clock(T0 + 3_600_000)

    async def main() -> None:
        b = await started(store, clock=clock)
        clock.advance(45)  # (past the old broker record, 30 s; within the 60 s leases)
        await b.watch()
        beats = await b.heartbeat("q", held, 600.0) if held else []
        assert [a.status for a in beats if not a.ok] == ["cancelled"] * marked, beats
        live = [a.token for a in beats if a.ok]
        done = await b.complete("q", [CompleteItem(t, b'"v4"') for t in live])
        assert all(a.ok for a in done), done
        await b.set_paused("q", False)
        await b.redrive("q")
        for _ in range(40):
            clock.advance(700)  # past every delay, backoff and old lease
            claimed = await b.claim("q", "w", 100, 30.0)
            if claimed:
                await b.complete("q", [CompleteItem(j.token, b"1") for j in claimed])
        await b._queues["q"].archiver.wait(10)
        await b.stop(drain_s=5)

    run(main())
    raw = orjson.loads(store.read(paths.state_key("q")).data)
    assert raw["version"] == 5 and raw["claims"] == [] and raw["spills"] == []
    after = stored(store)
    assert after.count_by_status() == dict.fromkeys(after.count_by_status(), 0)
    lines = archive_lines(store)
    ids = [rec["id"] for rec in lines]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(j.id for j in before.jobs.values())
    results = {rec["id"]: rec.get("result") for rec in lines}
    for token in live_ids(held, before):
        assert results[token] == "v4"


def live_ids(held: list[str], state: object) -> list[str]:
    """The ids of the held tokens' jobs that were not marked for cancel."""
    out = []
    for token in held:
        job = state.job(token.partition(".")[0])  # type: ignore[attr-defined]
        if job is not None and job.status == CLAIMED and job.cancel_ms is None:
            out.append(job.id)
    return out
