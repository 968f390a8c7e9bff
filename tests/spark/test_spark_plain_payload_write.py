"""A Spark write of a plain string ``payload`` column (the Arrow-joined staging
path of ``osqueue_spark.datasource.rows.arrow_staged_chunks``, two stage
requests in flight a task) into segment objects: payload text that JSON allows
but a line-based reader might mangle ("\\r", tabs and spaces at either end,
U+2028) arrives byte for byte, every row exactly once, also when a task's
first attempt fails after it has staged chunks. Real local SparkSession,
in-process broker over a file store; the store is counted afterwards (head
and segment objects)."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.http.server import BrokerServer
from broker.model.format import segment_format
from broker.storage import FileStore
from osqueue_spark import start_broker
from tests.support.inprocess import segment_payloads, stored

pytestmark = pytest.mark.spark

ODD = ['{"a":%d}\r', " %d ", '"\u2028%d"', "%d\t", "\t[%d]", '{"b":"%%s%d"}']


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("plain-store")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerServer]:
    with start_broker(f"file://{store_dir}", lease_s=30, segment_push_jobs=1) as b:
        yield b


def test_plain_payload_write_keeps_odd_text_and_every_row_once_under_task_retry(
        spark: Any, broker: BrokerServer, store_dir: Path) -> None:
    from pyspark.sql import functions as F

    q = f"pp-{uuid.uuid4().hex[:8]}"
    marker = f"/tmp/osq-plain-failed-{q}"
    rows = 6_000

    def text(value: int) -> str:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if (ctx is not None and ctx.partitionId() == 1 and ctx.attemptNumber() == 0
                and value % 1500 == 1200):
            open(marker, "w").close()
            raise RuntimeError("injected task failure after staging part of the partition")
        return ODD[value % len(ODD)] % value

    df = spark.range(rows, numPartitions=4).select(F.udf(text, "string")("id").alias("payload"))
    (df.write.format("osqueue").option("broker", broker.url).option("queue", q)
     .option("batchSize", "100").mode("append").save())
    store = FileStore(store_dir)
    state = stored(store, q)
    head = [job.payload.decode() for job in state.jobs.values()]
    in_segments = []
    for ref in state.segment_refs:
        got = store.read(ref.key)
        for seq, line in enumerate(segment_format.segment_lines(got.data, ref), ref.next_seq):
            in_segments.append(segment_format.segment_job(seq, line, ref).payload.decode())
    assert len(segment_payloads(store, state)) == len(in_segments)
    every = Counter(head + in_segments)
    want = Counter(ODD[v % len(ODD)] % v for v in range(rows))
    assert every == want
    assert store.list(f"{q}/staging/") == []
    assert os.path.exists(marker)  # (the first attempt of partition 1 failed mid-way)
