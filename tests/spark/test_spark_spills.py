"""``spark.read.format("osqueue")`` of a queue whose dead jobs are in spill
objects (a broker with ``spill_jobs`` on) on a real local SparkSession: the
head's jobs and each spill object's dead jobs, one partition per spill
object, each job once with its error; a job taken out of its object is read
from the head only; a spill object missing while the head still references it
fails the read naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.model.ops import FailItem, NewJob
from broker.storage.files import FileStore
from tests.support.inprocess import run, started, stored

pytestmark = pytest.mark.spark


def load(spark: Any, url: str) -> Any:
    return spark.read.format("osqueue").option("store", url).option("queue", "q").load()


def _queue_with_spills(root: Path) -> tuple[list[str], list[str], str]:
    """Two spill objects of dead jobs (20 and 25), one of them redriven by id
    back into the head, and 3 pending jobs: the dead ids, the pending ids (the
    redriven one among them) and the redriven id."""
    store = FileStore(root)

    async def go() -> tuple[list[str], list[str], str]:
        a = await started(store, spill_jobs=10)
        dead: list[str] = []
        for batch in (20, 25):
            ids = await a.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=1)
                                     for i in range(batch)])
            got = await a.claim("q", "w", max_jobs=batch)
            await a.fail("q", [FailItem(j.token, f"boom {j.id}", 0) for j in got])
            dead += ids
        pending = list(await a.push("q", [b'{"p":1}', b'{"p":2}', b'{"p":3}']))
        out = dead.pop(4)
        assert await a.redrive("q", [out]) == 1
        await a.stop()
        return sorted(dead), sorted([*pending, out]), out

    return run(go())


def test_the_dead_jobs_of_spill_objects_are_read_once_a_partition_each(
        spark: Any, tmp_path: Path) -> None:
    dead, pending, out = _queue_with_spills(tmp_path)
    assert len(stored(FileStore(tmp_path)).spill_refs) == 2
    df = load(spark, f"file://{tmp_path}")
    assert df.rdd.getNumPartitions() == 3  # the head and two spill objects
    rows = df.selectExpr("id", "status", "attempts", "last_error",
                         "spark_partition_id() AS part").collect()
    assert len(rows) == len({r["id"] for r in rows}) == len(dead) + len(pending)
    assert sorted(r["id"] for r in rows if r["status"] == "dead") == dead
    assert sorted(r["id"] for r in rows if r["status"] == "pending") == pending
    assert all(r["last_error"] == f"boom {r['id']}" and r["attempts"] == 1
               for r in rows if r["status"] == "dead")
    assert {r["part"] for r in rows if r["status"] == "dead"} == {1, 2}
    assert [r["part"] for r in rows if r["id"] == out] == [0]


def test_a_missing_spill_object_fails_the_read_naming_it(spark: Any, tmp_path: Path) -> None:
    _queue_with_spills(tmp_path)
    store = FileStore(tmp_path)
    key = stored(store).spill_refs[0].key
    store.delete(key)
    with pytest.raises(Exception, match=r"spill object") as err:
        load(spark, f"file://{tmp_path}").collect()
    assert key in str(err.value)


def test_a_redriven_spill_object_reads_as_pending_from_its_cursor(
        spark: Any, tmp_path: Path) -> None:
    dead, pending, _ = _queue_with_spills(tmp_path)
    store = FileStore(tmp_path)

    async def go() -> list[str]:
        a = await started(store, spill_jobs=10)
        assert await a.redrive("q") == len(dead)
        got = [j.id for j in await a.claim("q", "w", max_jobs=10)]
        await a.stop()
        return got

    claimed = run(go())
    assert {ref.kind for ref in stored(store).spill_refs} == {"pending"}
    rows = load(spark, f"file://{tmp_path}").selectExpr("id", "status", "attempts").collect()
    assert len(rows) == len({r["id"] for r in rows}) == len(dead) + len(pending)
    assert sorted(r["id"] for r in rows if r["status"] == "claimed") == sorted(claimed)
    assert all(r["attempts"] == 0 for r in rows if r["status"] == "pending")
