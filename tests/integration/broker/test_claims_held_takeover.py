"""Claims from segments held in claim records (``OSQUEUE_HELD_IN_RECORDS``)
through real broker processes over HTTP on the file store: a bulk push goes
into a segment; one claim of 2,000 adds one record and no job line; the owner
is killed with ``SIGKILL`` right after; the successor (empty held-jobs cache)
renews the record, and the worker completes every job through it with the
tokens of the first owner (its ``prepare`` reads the held lines back from the
segment); a repeat of a complete answers completed; every job is archived once
with its payload, and the segment object is deleted only once its last record
left the head (after the landed commit that dropped it)."""

from __future__ import annotations

import signal
from pathlib import Path

import orjson

from broker import paths
from broker.model.format import archive
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually

ENV = {"OSQUEUE_HELD_IN_RECORDS": "true"}
N = 2_000


def _raw(root: Path) -> bytes:
    return FileStore(root).read(paths.state_key("q")).data


def test_owner_killed_after_a_claim_of_2000_held_in_a_record(tmp_path: Path) -> None:
    store = f"file://{tmp_path}"
    args = ("--lease-s", "2", "--segment-push-jobs", "100")
    first = BrokerProcess(store, *args, env=ENV).start()
    second = BrokerProcess(store, *args, env=ENV).start()
    try:
        client = QueueClient([first.url, second.url], "q", retry_s=60)
        client.create(max_attempts=3)
        ids = client.push_many([{"payload": {"n": i, "pad": "x" * 40}} for i in range(N)])
        jobs = client.claim("w", N, lease_s=300)
        assert sorted(j.id for j in jobs) == sorted(ids)
        assert {orjson.loads(orjson.dumps(j.payload))["n"] for j in jobs} == set(range(N))
        raw = orjson.loads(_raw(tmp_path))
        assert raw["jobs"] == [] and len(raw["claims"]) == 1
        assert raw["claims"][0]["n"] == N and "seg" in raw["claims"][0]["parts"][0]
        assert len(_raw(tmp_path)) < 20_000  # (2,000 held jobs, no line of their own)

        owner = decode_state(_raw(tmp_path)).broker
        assert owner is not None
        (first if first.url == owner.url else second).stop(signal.SIGKILL)
        survivor = second if first.url == owner.url else first

        def taken_over() -> bool:
            client.stats()
            record = decode_state(_raw(tmp_path)).broker
            return record is not None and record.url == survivor.url

        eventually(taken_over, 60, "the takeover")
        head = decode_state(_raw(tmp_path))
        assert len(head.claim_records) == 1 and not list(head.jobs.touched())
        assert head.segment_refs  # (exhausted, named by the record)
        assert client.stats()["counts"]["claimed"] == N

        assert all(a.ok for a in client.heartbeat([j.token for j in jobs[:5]], lease_s=300))
        for at in range(0, N, 500):
            batch = jobs[at:at + 500]
            answers = client.complete_many([(j.token, {"ok": j.id}) for j in batch])
            assert all(a.ok for a in answers), [a for a in answers if not a.ok][:3]
        again = client.complete(jobs[0].token, {"ok": jobs[0].id})  # a repeat
        assert again.ok and again.status == "completed"

        def all_archived() -> list[dict] | None:  # type: ignore[type-arg]
            rows = list(archive.read_all(FileStore(tmp_path), "q"))
            return rows if len(rows) >= N else None

        rows = eventually(all_archived, 60, "every job archived")
        assert sorted(r["id"] for r in rows) == sorted(ids)  # each once
        assert {r["payload"]["n"] for r in rows} == set(range(N))
        assert all(r["result"] == {"ok": r["id"]} for r in rows)

        def deleted() -> bool:
            return FileStore(tmp_path).list(paths.segments_prefix("q")) == []

        eventually(deleted, 30, "the segment's deletion")
        head = decode_state(_raw(tmp_path))
        assert head.segment_refs == [] and not head.claim_records
    finally:
        for proc in (first, second):
            proc.stop(signal.SIGKILL)


def test_held_jobs_are_read_as_claimed_by_the_owner_and_by_another_broker(
        tmp_path: Path) -> None:
    store = f"file://{tmp_path}"
    args = ("--lease-s", "30", "--segment-push-jobs", "10")
    owner = BrokerProcess(store, *args, env=ENV).start()
    other = BrokerProcess(store, *args, env=ENV).start()
    try:
        client = QueueClient([owner.url], "q", retry_s=60)
        client.create()
        ids = client.push_many([{"payload": {"n": i}} for i in range(30)])
        jobs = client.claim("w-7", 12, lease_s=300)
        assert orjson.loads(_raw(tmp_path))["jobs"] == []  # (held in the record only)
        for url in (owner.url, other.url):  # the owner's cache; the other reads the segment
            reader = QueueClient([url], "q", retry_s=60)
            rows = reader.jobs(limit=100)
            assert [r["id"] for r in rows] == ids
            assert [r["status"] for r in rows] == ["claimed"] * 12 + ["pending"] * 18
            assert all(r["lease"]["worker"] == "w-7" for r in rows[:12])
            claimed = reader.jobs(status="claimed", limit=5, after=ids[3])
            assert [r["id"] for r in claimed] == ids[4:9]
            assert [r["payload"] for r in claimed] == [{"n": i} for i in range(4, 9)]
            one = reader.job(jobs[5].id)
            assert one["status"] == "claimed" and one["payload"] == {"n": 5}
            assert one["lease"]["worker"] == "w-7" and "token" not in one["lease"]
            assert reader.stats()["counts"]["claimed"] == 12
    finally:
        for proc in (owner, other):
            proc.stop(signal.SIGKILL)
