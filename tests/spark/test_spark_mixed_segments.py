"""``spark.read.format("osqueue")`` of a queue whose head references segment
objects of both formats: version 1 (among them the golden object a
broker of that version wrote) and version 2. Every job once, with the fields
its format holds (a version-1 line's max_attempts and created_at, a
version-2 header's), payloads byte for byte; a partition for the head and
one per segment. The queue: :mod:`tests.support.mixed_segments`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker import timefmt
from broker.storage import FileStore
from tests.support.mixed_segments import write_mixed

pytestmark = pytest.mark.spark


def test_a_queue_of_version_1_and_version_2_segments_reads_every_job_once(
        spark: Any, tmp_path: Path) -> None:
    mixed = write_mixed(FileStore(tmp_path), timefmt.now_ms())
    df = spark.read.format("osqueue").option("store", f"file://{tmp_path}") \
        .option("queue", "q").load()
    assert df.rdd.getNumPartitions() == 1 + len(mixed.refs)
    rows = df.selectExpr(
        "id", "seq", "status", "priority", "payload", "attempts", "max_attempts",
        "unix_millis(created_at) AS created_ms", "unix_millis(run_at) AS run_ms").collect()
    assert sorted(row["id"] for row in rows) == list(mixed.jobs)
    for row in rows:
        job = mixed.jobs[row["id"]]
        assert row.asDict() == {
            "id": job.id, "seq": job.seq, "status": "pending", "priority": job.priority,
            "payload": job.payload.decode(), "attempts": 0,
            "max_attempts": job.max_attempts, "created_ms": job.created_ms,
            "run_ms": job.run_ms}
