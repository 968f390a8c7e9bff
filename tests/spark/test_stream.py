"""Streaming sink (run identity of ``writeStream``) and streaming source (leases held for
the whole life of a micro-batch), against an in-process broker."""

from __future__ import annotations

import json
import pickle
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row

from broker.http.server import BrokerServer
from osqueue_spark import QueueClient, start_broker
from osqueue_spark.datasource.options import StreamReadOptions, StreamWriteOptions
from osqueue_spark.datasource.stream_reader import QueueStreamReader
from osqueue_spark.datasource.stream_writer import QueueStreamWriter


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    store_dir: Path = tmp_path_factory.mktemp("stream-store")
    with start_broker(f"file://{store_dir}", lease_s=30, backoff_base_s=0.05) as b:
        yield b


def qname() -> str:
    return f"st-{uuid.uuid4().hex[:8]}"


def payload_ns(broker: BrokerServer, q: str) -> list[int]:
    return sorted(j["payload"]["n"] for j in QueueClient(broker.url, q).iter_jobs())


# -- writeStream: a batch id names a batch of one run, not of the checkpoint path -------


@pytest.mark.spark
def test_streaming_write_publishes_after_checkpoint_reset(any_spark: Any, broker: BrokerServer,
                                                          tmp_path: Path) -> None:
    q = qname()
    ckpt = tmp_path / "ckpt"

    def run(src: Path) -> None:
        stream = (any_spark.readStream.schema("n long").json(str(src))
                  .selectExpr("to_json(struct(n)) AS payload"))  # SQL: the same under Connect
        query = (stream.writeStream.format("osqueue").option("broker", broker.url)
                 .option("queue", q).option("checkpointLocation", str(ckpt))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None

    first = tmp_path / "in-1"
    first.mkdir()
    (first / "a.json").write_text("\n".join(json.dumps({"n": i}) for i in range(50)))
    run(first)
    assert payload_ns(broker, q) == list(range(50))

    shutil.rmtree(ckpt)  # a new run of the query: its batch ids start again at 0
    second = tmp_path / "in-2"
    second.mkdir()
    (second / "b.json").write_text("\n".join(json.dumps({"n": i}) for i in range(100, 130)))
    run(second)
    assert sorted(p.name for p in (ckpt / "commits").iterdir() if p.name.isdigit()) == ["0"]
    assert payload_ns(broker, q) == [*range(50), *range(100, 130)]

    run(second)  # a restart of the new run from its checkpoint: nothing new, nothing twice
    assert payload_ns(broker, q) == [*range(50), *range(100, 130)]


@pytest.mark.spark
def test_streaming_write_takes_the_query_id_from_spark(any_spark: Any, broker: BrokerServer,
                                                       tmp_path: Path) -> None:
    """No checkpointLocation option (the checkpoint comes from the session conf), so
    the sink cannot read the checkpoint's metadata: the query id reaches it from
    Spark's tasks. A new run with the SAME data at batch 0 is still a new run.
    Under Connect the query runs in the server, whose tasks carry the id alike."""
    q = qname()
    root = tmp_path / "checkpoints"
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_text("\n".join(json.dumps({"n": i}) for i in range(20)))
    name = f"osq_{q.replace('-', '_')}"
    ids = []

    def run() -> None:
        stream = (any_spark.readStream.schema("n long").json(str(src))
                  .selectExpr("to_json(struct(n)) AS payload"))  # SQL: the same under Connect
        query = (stream.writeStream.format("osqueue").queryName(name)
                 .option("broker", broker.url).option("queue", q).option("streamId", name)
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        ids.append(query.id)

    any_spark.conf.set("spark.sql.streaming.checkpointLocation", str(root))
    try:
        run()
        run()  # a restart from the checkpoint: nothing twice
        assert payload_ns(broker, q) == list(range(20))
        shutil.rmtree(root / name)  # a new run, from batch 0, over the same files
        run()
    finally:
        any_spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert ids[0] == ids[1] != ids[2]
    assert payload_ns(broker, q) == sorted([*range(20), *range(20)])


def rows(ns: range | list[int]) -> list[Row]:
    return [Row(payload=json.dumps({"n": n})) for n in ns]


def commit_batch(options: dict[str, str], batch_id: int, *tasks: list[Row]) -> None:
    """What Spark does for one micro-batch: a writer per task (on executors), then a
    fresh writer's commit (on the driver). Outside a task no query id is known."""
    opts = StreamWriteOptions.parse(options)
    messages = [QueueStreamWriter(opts).write(iter(task)) for task in tasks]
    QueueStreamWriter(opts).commit(list(messages), batch_id)


def test_stream_writer_reads_the_query_id_from_a_local_checkpoint(broker: BrokerServer,
                                                                   tmp_path: Path) -> None:
    q = qname()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")
    options = {"broker": broker.url, "queue": q, "checkpointLocation": f"file://{ckpt}"}
    commit_batch(options, 0, rows(range(5)))
    commit_batch(options, 0, rows([4, 3]), rows(range(3)))  # a replay, split and reordered
    assert payload_ns(broker, q) == list(range(5))

    shutil.rmtree(ckpt)  # checkpoint reset: Spark writes a new query id
    ckpt.mkdir()
    (ckpt / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")
    commit_batch(options, 0, rows(range(5)))  # the same data, but a new run: published
    assert payload_ns(broker, q) == sorted([*range(5), *range(5)])


def test_stream_writer_without_a_query_id_keys_batches_by_content(broker: BrokerServer) -> None:
    q = qname()
    options = {"broker": broker.url, "queue": q, "streamId": "orders",
               "checkpointLocation": "s3://bucket/not-readable-here/ckpt"}
    commit_batch(options, 0, rows(range(5)))
    commit_batch(options, 0, rows([2, 0]), rows([4, 1, 3]))  # a replay: same batch, same data
    commit_batch(options, 1, rows(range(5, 8)))
    assert payload_ns(broker, q) == list(range(8))
    commit_batch(options, 0, rows(range(10, 13)))  # a new run from batch 0 with other data
    assert payload_ns(broker, q) == [*range(8), *range(10, 13)]


# -- readStream: a micro-batch longer than the lease keeps its jobs ------------------------


LEASE_S = 2.0  # three beats of slack per lease (a beat every LEASE_S / 3)


def hold_for_leases(client: QueueClient, leases: float) -> int:
    """Let ``leases`` lease periods pass (time.monotonic), polling the queue meanwhile;
    return the most jobs seen reclaimed during the wait."""
    began = time.monotonic()
    reclaimed = 0
    while time.monotonic() - began < leases * LEASE_S:
        reclaimed = max(reclaimed, client.stats()["reclaimed_total"])
        time.sleep(0.1)  # a poll interval, not a synchronisation
    return reclaimed


def test_stream_reader_keeps_a_long_batch_leased(broker: BrokerServer) -> None:
    """Drive the reader as Spark does: plan on the driver, read on an executor copy,
    take three lease periods, commit."""
    q = qname()
    client = QueueClient(broker.url, q)
    pushed = client.push_many([{"payload": {"n": i}} for i in range(20)])
    opts = StreamReadOptions.parse({"broker": broker.url, "queue": q,
                                    "leaseS": str(LEASE_S), "maxJobsPerTrigger": "50"})
    beating = {t for t in threading.enumerate() if t.name == "osqueue-heartbeat"}
    reader = QueueStreamReader(opts)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    parts = reader.partitions(start, end)
    executor_copy = pickle.loads(pickle.dumps(reader))  # what executors get: no thread
    assert not hasattr(executor_copy, "_hb") or executor_copy._hb is None
    got = [row for part in parts for row in executor_copy.read(part)]
    assert sorted(r[0] for r in got) == sorted(pushed) and {r[2] for r in got} == {1}

    assert hold_for_leases(client, 3) == 0
    assert client.stats()["counts"]["claimed"] == 20
    reader.commit(end)
    assert reader.latestOffset(end, None) == end  # nothing left to claim
    reader.stop()
    stats = client.stats()
    assert stats["completed_total"] == 20 and stats["reclaimed_total"] == 0
    assert stats["total"] == 0
    assert {t for t in threading.enumerate() if t.name == "osqueue-heartbeat"} == beating


@pytest.mark.spark
def test_streaming_read_batch_longer_than_the_lease(spark: Any, broker: BrokerServer,
                                                    tmp_path: Path) -> None:
    q = qname()
    client = QueueClient(broker.url, q)
    pushed = client.push_many([{"payload": {"n": i}} for i in range(12)])
    delivered: list[tuple[str, int]] = []
    reclaimed_during: list[int] = []
    held = threading.Event()

    def slow_batch(df: Any, batch_id: int) -> None:  # runs in this (the driver's) process
        got = df.collect()
        delivered.extend((r["id"], r["attempt"]) for r in got)
        if got and not held.is_set():
            reclaimed_during.append(hold_for_leases(client, 3))
            held.set()

    df = (spark.readStream.format("osqueue").option("broker", broker.url).option("queue", q)
          .option("maxJobsPerTrigger", "100").option("leaseS", str(LEASE_S)).load())
    query = (df.writeStream.foreachBatch(slow_batch)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        assert held.wait(120), "no batch arrived"
        deadline = time.monotonic() + 120
        while client.stats()["completed_total"] < 12 and time.monotonic() < deadline:
            query.awaitTermination(0.2)
    finally:
        query.stop()
    assert query.exception() is None
    assert reclaimed_during == [0]
    stats = client.stats()
    assert stats["completed_total"] == 12 and stats["reclaimed_total"] == 0
    assert stats["total"] == 0
    assert sorted(delivered) == sorted((i, 1) for i in pushed)  # each job once, first attempt
