"""Dead jobs in spill objects (``OSQUEUE_SPILL_JOBS``) through a real broker
process over HTTP on the file store: a fail of 2,000 claimed jobs with one
attempt writes one spill object and no dead line in the queue object (under
1 MB); pages, lookups and stats show them from the object; a redrive of all
is one small commit (by reference), the claims then get each job exactly
once (the object deleted once drained and dropped) and the archive holds
each once."""

from __future__ import annotations

from pathlib import Path

import orjson

from broker import paths
from broker.model.format import archive
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually

ENV = {"OSQUEUE_SPILL_JOBS": "1024"}
N = 2_000


def _raw(root: Path) -> bytes:
    return FileStore(root).read(paths.state_key("q")).data


def _spills(root: Path) -> list[str]:
    return sorted(FileStore(root).list(paths.spills_prefix("q")))


def test_a_fail_of_2000_spills_once_and_a_redrive_serves_each_job_once(
        tmp_path: Path) -> None:
    broker = BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", "100",
                           env=ENV).start()
    try:
        client = QueueClient([broker.url], "q", retry_s=60)
        client.create(max_attempts=1)
        ids = client.push_many([{"payload": {"n": i, "pad": "x" * 40}} for i in range(N)])
        assert orjson.loads(_raw(tmp_path))["segments"]  # (filled in segments)
        jobs = client.claim("w", N, lease_s=300)
        assert sorted(j.id for j in jobs) == sorted(ids)
        answers = client.fail_many([(j.token, f"boom {j.id}", None) for j in jobs])
        assert all(a.ok for a in answers)

        data = _raw(tmp_path)
        raw = orjson.loads(data)
        assert len(raw["spills"]) == 1 and raw["spills"][0]["count"] == N
        assert [line for line in raw["jobs"] if line.get("status") == "dead"] == []
        assert len(data) < 1_000_000
        assert _spills(tmp_path) == [raw["spills"][0]["key"]]
        stats = client.stats()
        assert stats["counts"]["dead"] == N and stats["in_spills"]["dead"] == N
        assert stats["spill_objects"] == {"dead": 1, "pending": 0}

        seen: list[str] = []
        after = None
        while True:
            page = client.jobs("dead", 500, after)
            seen += [row["id"] for row in page]
            if len(page) < 500:
                break
            after = page[-1]["id"]
        assert seen == sorted(ids)
        found = client.job(ids[7])
        assert (found["location"], found["status"]) == ("spill", "dead")
        assert found["last_error"] == f"boom {ids[7]}"

        size = len(_raw(tmp_path))
        assert client.redrive() == N  # by reference: one small commit
        raw = orjson.loads(_raw(tmp_path))
        assert [(r["kind"], r["taken"]) for r in raw["spills"]] == [("pending", 0)]
        assert "reset_at" in raw["spills"][0] and len(_raw(tmp_path)) - size < 500
        assert client.stats()["counts"]["pending"] == N
        claimed = []
        for _ in range(N // 500):
            got = client.claim("w2", 500, lease_s=300)
            assert all(j.attempt == 1 for j in got)
            claimed += got
            answers = client.complete_many([(j.token, {"ok": j.id}) for j in got])
            assert all(a.ok for a in answers)
        assert client.claim("w2", 500, lease_s=300) == []
        assert sorted(j.id for j in claimed) == sorted(ids)  # each exactly once
        # (exhausted; named by the claims' records until their completions, done entries,
        # are archived: then dropped)
        eventually(lambda: orjson.loads(_raw(tmp_path))["spills"] == [], 60,
                   "the drained ref dropped")
        eventually(lambda: _spills(tmp_path) == [], 30, "the drained object deleted")

        def all_archived() -> list[dict] | None:  # type: ignore[type-arg]
            rows = list(archive.read_all(FileStore(tmp_path), "q"))
            return rows if len(rows) >= N else None

        rows = eventually(all_archived, 60, "every job archived")
        assert sorted(r["id"] for r in rows) == sorted(ids)  # each once
    finally:
        broker.stop()
