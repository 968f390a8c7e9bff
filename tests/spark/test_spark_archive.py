"""The Spark archive table (``table=archive``) on a real local SparkSession: archive
objects read with pruning and filter pushdown, each job once, payloads and
results verbatim."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker.storage import FileStore
from osqueue_spark import QueueClient, start_broker

pytestmark = pytest.mark.spark


def rows_per_partition(df: Any) -> dict[int, int]:
    """How many of ``df``'s rows each scan partition gave (``df.rdd`` is not there
    under Connect); a partition that gave no row is absent."""
    return {r[0]: r[1] for r in df.selectExpr("spark_partition_id() AS p").groupBy("p")
            .count().collect()}


def test_archive_read_with_pruning(any_spark: Any, tmp_path: Path) -> None:
    """The archive table reads one partition per archive object (or per
    objectsPerPartition objects), prunes objects by since/until from their names;
    with filterPushdown every scan of a DataFrame still reads every object."""
    spark, store = any_spark, FileStore(tmp_path)
    from broker.model.format import archive

    hours = ["2026-01-01T10", "2026-01-01T11", "2026-01-02T09"]
    for h_i, hour in enumerate(hours):
        for obj in range(2):
            recs = []
            for n in range(5):
                done = f"{hour}:{10 + obj:02d}:{n:02d}.000Z"
                recs.append({"id": f"j{h_i}{obj}{n}", "seq": n, "status": "completed",
                             "priority": 0, "payload": {"h": h_i}, "attempts": 1,
                             "max_attempts": 3, "created_at": done, "run_at": done,
                             "completed_at": done, "worker": "w", "result": {"ok": n}})
            store.put(f"arch/archive/{hour}/{obj:012d}-c-{h_i}{obj}.jsonl",
                      archive.encode_records(recs))
    def base() -> Any:  # a fresh reader each time: readers keep their options
        return (spark.read.format("osqueue").option("store", f"file://{tmp_path}")
                .option("queue", "arch").option("table", "archive")
                .option("objectsPerPartition", "1"))

    everything = base().load()  # one partition per archive object
    assert rows_per_partition(everything) == dict.fromkeys(range(6), 5)
    df = base().option("since", "2026-01-01T11:00:00Z").option(
        "until", "2026-01-01T23:59:59Z").load()
    assert rows_per_partition(df) == {0: 5, 1: 5}  # one hour's two objects
    assert {r["id"][1] for r in df.collect()} == {"1"}
    grouped = base().option("objectsPerPartition", "4").load()
    assert rows_per_partition(grouped) == {0: 20, 1: 10}
    pushed = base().option("filterPushdown", "true").load()
    later = pushed.where("completed_at >= timestamp'2026-01-02 00:00:00+00:00'")
    assert later.count() == 10
    # Every scan of the one DataFrame reads every object: PySpark 4.3 gives each
    # scan its last pushdown's plan, so pruning for `later` dropped rows here
    assert pushed.count() == 30
    assert pushed.where("status = 'dead'").union(pushed).count() == 30
    assert pushed.where("status = 'dead'").count() == 0
    assert json.loads(later.first()["result"])["ok"] in range(5)


def test_archive_read_shows_each_job_once_with_legacy_orphans(spark: Any,
                                                             tmp_path: Path) -> None:
    """Objects of osqueue 0.1 (named by broker id) may hold an orphan: a job the
    broker archived before a commit that failed, completed again later. The
    reader keeps each job's latest completion; current objects hold each job once."""
    from broker.model.format import archive

    store = FileStore(tmp_path)

    def rec(job: str, worker: str, at: str) -> dict[str, Any]:
        return {"id": job, "seq": int(job[1:]), "status": "completed", "priority": 0,
                "payload": {"job": job}, "attempts": 1, "max_attempts": 3, "created_at": at,
                "run_at": at, "completed_at": at, "worker": worker, "result": worker}

    hour = "2026-01-01T10"
    store.put(f"old/archive/{hour}/000000000007-b-host-1-aaaaaa.jsonl", archive.encode_records(
        [rec("j0000000001", "told-stale", f"{hour}:00:01.000Z")]))  # the orphan
    store.put(f"old/archive/{hour}/000000000009-b-host-1-aaaaaa.jsonl", archive.encode_records(
        [rec("j0000000001", "real", f"{hour}:00:05.000Z"),
         rec("j0000000002", "real", f"{hour}:00:05.000Z")]))
    store.put(f"old/archive/{hour}/000000000012-c-5d0e.jsonl", archive.encode_records(
        [rec("j0000000003", "real", f"{hour}:00:09.000Z")]))
    df = (spark.read.format("osqueue").option("store", f"file://{tmp_path}")
          .option("queue", "old").option("table", "archive").load())
    rows = sorted((r["id"], r["worker"]) for r in df.collect())
    assert rows == [("j0000000001", "real"), ("j0000000002", "real"), ("j0000000003", "real")]
    assert sorted((r["id"], r["worker"]) for r in archive.read_all(store, "old")) == rows


def test_archive_read_keeps_payloads_and_results_verbatim(spark: Any, tmp_path: Path) -> None:
    """Review R11: the archive table re-encoded payloads (big integers became floats)."""
    big = '{"account":123456789012345678901234567890}'
    with start_broker(f"file://{tmp_path}") as b:
        client = QueueClient(b.url, "big")
        client.stage_lines("w/c0", f"\t{big}\n".encode())
        client.publish("w/", ["w/c0"], once="write:w")
        [job] = client.claim("w")
        client.complete(job.token, {"total": 12345678901234567890})  # within 64 bits
    row = (spark.read.format("osqueue").option("store", f"file://{tmp_path}")
           .option("queue", "big").option("table", "archive").load().first())
    assert row["payload"] == big and row["result"] == '{"total":12345678901234567890}'
    # the archive keeps the stored token: the client's without its tag (broker.model.tokens)
    assert job.token.startswith(row["token"] + "-") and row["commit_seq"] > 0
