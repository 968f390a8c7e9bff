"""``spark.read.format("osqueue")`` of a queue whose small dead spill objects
were merged (compaction, COMPACT_REFS lowered to 3) on a real local
SparkSession: one partition per object the head references (the merged one
and those spilled beside it), each dead job once with its error; the old objects
are gone from the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.model import spill_compaction
from broker.model.ops import FailItem, NewJob
from broker.storage.files import FileStore
from tests.support.inprocess import run, started, stored, until
from tests.support.spill_store import spill_keys

#: dead jobs spilled past one; pending ones (pushed with options) kept inline
DEAD_SPILLS = {"spill_jobs": 1, "spill_pending": False}

pytestmark = pytest.mark.spark


def _queue_with_a_merged_object(root: Path) -> list[str]:
    """Six rounds of two dead jobs (one small object each), the first four
    merged into one: the dead ids."""
    store = FileStore(root)

    async def go() -> list[str]:
        a = await started(store, **DEAD_SPILLS)
        dead: list[str] = []
        for r in range(6):
            ids = await a.push("q", [NewJob(b'{"r":%d,"n":%d}' % (r, i), max_attempts=1)
                                     for i in range(2)])
            got = await a.claim("q", "w", max_jobs=2)
            await a.fail("q", [FailItem(j.token, f"boom {j.id}", 0) for j in got])
            dead += ids
            if r == 4:  # (the first four merged: started by this fail, landed by a push)
                writer = a._queues["q"].target.spills
                await a.push("q", [NewJob(b'{"p":1}', priority=-1)])
                await until(lambda w=writer: w.compactions == 1 or w.ready is not None)
                await a.push("q", [NewJob(b'{"p":2}', priority=-1)])
        await until(lambda: len(spill_keys(store)) == 3)  # (the old ones deleted)
        await a.stop()
        return sorted(dead)

    return run(go())


def test_merged_dead_objects_are_read_once_a_partition_each(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill_compaction, "COMPACT_REFS", 3)
    dead = _queue_with_a_merged_object(tmp_path)
    refs = stored(FileStore(tmp_path)).spill_refs
    assert sorted(ref.count for ref in refs) == [2, 2, 8]
    df = spark.read.format("osqueue").option("store", f"file://{tmp_path}") \
        .option("queue", "q").load()
    assert df.rdd.getNumPartitions() == 4  # the head, the merged object, two new ones
    rows = df.selectExpr("id", "status", "attempts", "last_error",
                         "spark_partition_id() AS part").collect()
    got = [r for r in rows if r["status"] == "dead"]
    assert sorted(r["id"] for r in got) == dead
    assert all(r["last_error"] == f"boom {r['id']}" and r["attempts"] == 1 for r in got)
    assert {r["part"] for r in got} == {1, 2, 3}
