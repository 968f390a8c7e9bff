"""Job groups from and to Spark on a real local SparkSession: a write with
``groupColumn`` gives each row's job that column's value as its group (null:
none; the column stays in the payload), every row exactly once also when a
task's first attempt fails after staging; the queue and archive tables read
the group back in their ``group`` column. A ``groupColumn`` that is missing or
not a string, and a value breaking the name rule, fail the write before
anything lands. In-process broker over a file store; the store is read
afterwards."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.http.server import BrokerServer
from broker.storage import FileStore
from osqueue_spark import QueueClient, start_broker
from tests.support.broker_process import eventually
from tests.support.inprocess import archive_lines, stored

pytestmark = pytest.mark.spark

TENANTS = ["t-a", None, 't"b\u00e9', "t-c"]


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("groups-store")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerServer]:
    # (grouped rows into the queue object: the path of a broker run with
    # --no-grouped-segments; tests/spark/test_spark_grouped_segments.py has the default's)
    with start_broker(f"file://{store_dir}", lease_s=30, grouped_segments=False) as b:
        yield b


def _frame(spark: Any, rows: int, fail_marker: str | None = None) -> Any:
    from pyspark.sql import functions as F

    def tenant(value: int) -> str | None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if (fail_marker is not None and ctx is not None and ctx.partitionId() == 1
                and ctx.attemptNumber() == 0 and value % 1000 == 900):
            open(fail_marker, "w").close()
            raise RuntimeError("injected task failure after staging part of the partition")
        return TENANTS[value % len(TENANTS)]

    return spark.range(rows, numPartitions=3).select(
        F.col("id").alias("n"), F.udf(tenant, "string")("id").alias("tenant"))


def test_a_grouped_write_lands_each_row_once_with_its_group_and_reads_back(
        spark: Any, broker: BrokerServer, store_dir: Path) -> None:
    q = f"g-{uuid.uuid4().hex[:8]}"
    marker = f"/tmp/osq-groups-failed-{q}"
    rows = 3_000
    (_frame(spark, rows, marker).write.format("osqueue").option("broker", broker.url)
     .option("queue", q).option("groupColumn", "tenant").option("batchSize", "200")
     .mode("append").save())
    assert os.path.exists(marker)  # (partition 1's first attempt failed mid-way)
    store = FileStore(store_dir)
    state = stored(store, q)
    got = Counter((job.group, job.payload) for job in state.jobs.values())
    want = Counter((TENANTS[n % 4], _payload(n)) for n in range(rows))
    assert got == want  # every row once, its group set, the column kept in the payload
    assert not state.segment_refs and store.list(f"{q}/staging/") == []

    table = (spark.read.format("osqueue").option("store", f"file://{store_dir}")
             .option("queue", q).load())
    assert table.columns[13:] == ["group", "errors"]  # (added last: positions kept)
    read = Counter((r["group"], r["payload"]) for r in table.select("group", "payload").collect())
    assert read == Counter((g, p.decode()) for (g, p), c in want.items() for _ in range(c))

    client = QueueClient(broker.url, q)
    done = 0
    while jobs := client.claim("w", max_jobs=1000, lease_s=60):
        assert all(j.group == j.payload["tenant"] for j in jobs)
        client.complete_many([(j.token, None) for j in jobs])
        done += len(jobs)
    assert done == rows
    eventually(lambda: len(archive_lines(store, q)) == rows, what="the archive objects")
    archived = (spark.read.format("osqueue").option("store", f"file://{store_dir}")
                .option("queue", q).option("table", "archive").load())
    assert Counter(r["group"] for r in archived.select("group").collect()) == \
        Counter(TENANTS[n % 4] for n in range(rows))


def test_a_foreach_partition_push_with_a_group_column_lands_each_row_once_in_its_group(
        spark: Any, broker: BrokerServer, store_dir: Path, tmp_path: Path) -> None:
    """``push_partition(group_column=)``: partition 0's first attempt pushes half
    its rows and dies; its retry pushes them all again. Every row is a job once,
    in its group, with the column kept in its payload."""
    from osqueue_spark import push_partition

    q = f"gp-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "died"
    push = push_partition(broker=broker.url, queue=q, batch_size=40, group_column="tenant")

    def flaky(rows: Any) -> None:
        from pyspark import TaskContext

        rows = list(rows)
        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            push(iter(rows[:len(rows) // 2]))
            marker.touch()
            raise RuntimeError("injected failure halfway through the push")
        push(iter(rows))

    rows = [(n, TENANTS[n % 4]) for n in range(300)]
    spark.sparkContext.parallelize(rows, 3).toDF("n long, tenant string").foreachPartition(flaky)
    assert marker.exists()
    got = Counter((job.group, job.payload) for job in stored(FileStore(store_dir), q).jobs.values())
    assert got == Counter((TENANTS[n % 4], _payload(n)) for n in range(300))


def _payload(n: int) -> bytes:
    import orjson

    tenant = TENANTS[n % 4]
    return orjson.dumps({"n": n, "tenant": tenant})


@pytest.mark.parametrize(("column", "message"), [
    ("tenant_id", "option 'groupColumn' names 'tenant_id', which is not a column"),
    ("n", "groupColumn 'n' is bigint; cast it to string"),
])
def test_a_bad_group_column_fails_the_write_before_anything_lands(
        spark: Any, broker: BrokerServer, store_dir: Path, column: str, message: str) -> None:
    q = f"gb-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception, match=message):
        (_frame(spark, 10).write.format("osqueue").option("broker", broker.url)
         .option("queue", q).option("groupColumn", column).mode("append").save())
    assert FileStore(store_dir).list(f"{q}/") == []


def test_a_bad_group_value_fails_the_write_and_nothing_lands(
        spark: Any, broker: BrokerServer, store_dir: Path) -> None:
    from pyspark.sql import functions as F

    q = f"gv-{uuid.uuid4().hex[:8]}"
    df = spark.range(50, numPartitions=2).select(
        F.col("id").alias("n"),
        F.when(F.col("id") == 37, F.lit("bad\u0001name")).otherwise(F.lit("ok"))
        .alias("tenant"))
    with pytest.raises(Exception, match=r"column 'tenant' in row \d+ of a batch: group must be"):
        (df.write.format("osqueue").option("broker", broker.url).option("queue", q)
         .option("groupColumn", "tenant").mode("append").save())
    store = FileStore(store_dir)
    assert not store.list(f"{q}/queue.json") or not stored(store, q).jobs
    assert store.list(f"{q}/staging/") == []


def test_fifo_groups_processed_in_push_order(spark: Any, broker: BrokerServer,
                                             tmp_path: Path) -> None:
    """``process()`` workers on a fifo queue, with a function that fails each job's
    first attempt (retried at once): per group the jobs complete in push order,
    and no two jobs of one group ever run at once."""
    from itertools import pairwise

    import orjson

    from osqueue_spark import RESULT_SCHEMA, process

    q = f"gf-{uuid.uuid4().hex[:8]}"
    client = QueueClient(broker.url, q)
    client.create(group_order="fifo")
    groups = ["g0", "g1", "g2"]
    ids = client.push_many([{"payload": {"g": g, "i": i, "dir": str(tmp_path)}, "group": g}
                            for i in range(6) for g in groups])
    group_of = {job_id: groups[k % 3] for k, job_id in enumerate(ids)}

    def first_attempt_fails(payload: dict[str, Any]) -> int:
        marker = Path(payload["dir"]) / f"{payload['g']}-{payload['i']}"
        if not marker.exists():
            marker.touch()
            raise RuntimeError("the first attempt fails")
        return int(payload["i"])

    rows = (spark.range(2).repartition(2)
            .mapInPandas(process(first_attempt_fails, broker=broker.url, queue=q, batch_size=4,
                                 idle_s=3, retry_in_s=0), RESULT_SCHEMA)
            .collect())
    assert Counter(r["status"] for r in rows) == {"failed": len(ids), "completed": len(ids)}
    for g in groups:
        mine = sorted((r for r in rows if group_of[r["id"]] == g), key=lambda r: r["started"])
        done = [orjson.loads(r["result"]) for r in mine if r["status"] == "completed"]
        assert done == list(range(6)), (g, done)  # push order
        for before, after in pairwise(mine):
            assert before["finished"] <= after["started"], (g, before, after)  # one at a time
