"""A Spark write with ``groupColumn`` to a broker writing grouped segments
(``grouped_segments``): the rows go into grouped segment objects (format 3,
each task's chunk sorted by group) like any other write, the head stays small,
every row lands exactly once with its group (also when a task's first attempt
fails after staging), and the queue table reads them back with their group.
Real local SparkSession, in-process broker over a file store; the store is
read afterwards."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker.http.server import BrokerServer
from broker.model.format import segment_format
from broker.storage import FileStore
from osqueue_spark import start_broker
from tests.support.inprocess import segment_payloads, stored

pytestmark = pytest.mark.spark

TENANTS = ["t-a", None, 't"b\u00e9', "t-c"]


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("grouped-segments-store")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerServer]:
    with start_broker(f"file://{store_dir}", lease_s=30, segment_push_jobs=100,
                      grouped_segments=True) as b:
        yield b


def _frame(spark: Any, rows: int, fail_marker: str) -> Any:
    from pyspark.sql import functions as F

    def tenant(value: int) -> str | None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if (ctx is not None and ctx.partitionId() == 1 and ctx.attemptNumber() == 0
                and value % 1000 == 900):
            open(fail_marker, "w").close()
            raise RuntimeError("injected task failure after staging part of the partition")
        return TENANTS[value % len(TENANTS)]

    return spark.range(rows, numPartitions=3).select(
        F.col("id").alias("n"), F.udf(tenant, "string")("id").alias("tenant"))


def test_a_grouped_write_goes_to_grouped_segments_each_row_once(
        spark: Any, broker: BrokerServer, store_dir: Path) -> None:
    q = f"gs-{uuid.uuid4().hex[:8]}"
    marker = f"/tmp/osq-grouped-segments-failed-{q}"
    rows = 3_000
    (_frame(spark, rows, marker).write.format("osqueue").option("broker", broker.url)
     .option("queue", q).option("groupColumn", "tenant").option("batchSize", "200")
     .mode("append").save())
    assert os.path.exists(marker)  # (partition 1's first attempt failed mid-way)
    store = FileStore(store_dir)
    state = stored(store, q)
    assert len(state.jobs) == 0 and state.segment_refs  # (nothing inline: all in segments)
    assert all(ref.groups is not None for ref in state.segment_refs)
    head = store.read(f"{q}/queue.json").data
    assert len(head) < 8 * 1024
    for ref in state.segment_refs:
        data = store.read(ref.key).data
        header = segment_format.read_header(data, ref.key)
        assert header.version == 3 and header.groups is not None
        assert len(header.groups) == len({g for g, _ in header.groups})  # (group-major)
    got = Counter((p["tenant"], p["n"]) for p in segment_payloads(store, state))
    assert got == Counter((TENANTS[n % 4], n) for n in range(rows))  # every row once

    table = (spark.read.format("osqueue").option("store", f"file://{store_dir}")
             .option("queue", q).load())
    read = Counter((r["group"], orjson.loads(r["payload"])["n"])
                   for r in table.select("group", "payload").collect())
    assert read == Counter((TENANTS[n % 4], n) for n in range(rows))
    assert store.list(f"{q}/staging/") == []
