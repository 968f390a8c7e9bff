"""readStream under ``trigger(availableNow=True)`` and admission control, classic and Connect.

The reader is driven here the way each PySpark version's engine drives it
(see :mod:`osqueue_spark.datasource.stream_reader`), and under real sessions of both
kinds; the archive objects in the store are the evidence of exactly once.
"""

from __future__ import annotations

import importlib.util
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.errors import InvalidRequest, OsqueueError, UnknownQueue
from broker.http.server import BrokerServer
from broker.model.format import archive
from broker.storage import ObjectStore, store_from_url
from osqueue_spark import QueueClient, start_broker
from osqueue_spark.datasource.options import StreamReadOptions
from osqueue_spark.datasource.stream_reader import QueueStreamReader, rows_allowed
from tests.support.serving import free_port


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"file://{tmp_path_factory.mktemp('available-now-store')}"


@pytest.fixture(scope="module")
def broker(store_url: str) -> Iterator[BrokerServer]:
    with start_broker(store_url, lease_s=30, backoff_base_s=0.05) as b:
        yield b


def qname() -> str:
    return f"an-{uuid.uuid4().hex[:8]}"


def archived_ids(store: ObjectStore, queue: str) -> Counter[str]:
    """Every job id on every line of every archive object of ``queue`` (raw: a
    job archived twice would count twice)."""
    return Counter(rec["id"] for key in archive.list_objects(store, queue)
                   for rec in archive.decode_records(store.get(key)))


def wait_archived(store: ObjectStore, queue: str, n: int, timeout_s: float = 60) -> Counter[str]:
    """The archive of ``queue`` once it holds ``n`` lines (it is written just after
    the completing commit, by the broker's archiver), or as it is at the deadline."""
    deadline = time.monotonic() + timeout_s
    ids = archived_ids(store, queue)
    while sum(ids.values()) < n and time.monotonic() < deadline:
        time.sleep(0.1)  # a poll interval: the archiver runs in the broker
        ids = archived_ids(store, queue)
    return ids


#: PySpark 4.2+ has the ReadLimit classes and the availableNow hook; on 4.0 and 4.1
#: Spark runs one batch for availableNow (see osqueue_spark.datasource.stream_reader).
needs_hook = pytest.mark.skipif(
    importlib.util.find_spec("pyspark.sql.streaming.datasource") is None,
    reason="PySpark < 4.2: no ReadLimit classes, availableNow runs a single batch")


def reader_for(url: str, queue: str, **options: str) -> QueueStreamReader:
    return QueueStreamReader(StreamReadOptions.parse({"broker": url, "queue": queue, **options}))


# -- the ReadLimit a batch obeys ----------------------------------------------------------


@needs_hook
def test_rows_allowed_reads_max_rows_of_each_limit() -> None:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxRows,
        ReadMinRows,
    )

    assert rows_allowed(ReadMaxRows(7), 1000) == 7  # the attribute is max_rows
    assert rows_allowed(ReadAllAvailable(), 1000) is None
    assert rows_allowed(None, 1000) == 1000  # PySpark 4.0 / 4.1: latestOffset()
    assert rows_allowed(ReadMinRows(5), 1000) == 1000
    assert rows_allowed(ReadMaxBytes(1 << 20), 1000) == 1000


@needs_hook
def test_default_read_limit_is_max_jobs_per_trigger(broker: BrokerServer) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    reader = reader_for(broker.url, qname(), maxJobsPerTrigger="123")
    assert reader.getDefaultReadLimit() == ReadMaxRows(123)


# -- the engine's calls, as PySpark 4.2+ makes them under availableNow ---------------------


def drive_available_now(reader: QueueStreamReader) -> list[list[tuple[Any, ...]]]:
    """Spark 4.2+'s MultiBatchExecutor: prepare, then plan and run batches with the
    default read limit until ``latestOffset`` answers its start (no new data).
    Returns the rows of each batch, read from executor copies of the reader."""
    import pickle

    reader.prepareForTriggerAvailableNow()
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    batches = []
    while True:
        end = reader.latestOffset(start, limit)
        if end == start:
            return batches
        executor = pickle.loads(pickle.dumps(reader))
        batches.append([row for part in reader.partitions(start, end)
                        for row in executor.read(part)])
        start = end


def test_available_now_drains_the_jobs_ready_at_start(broker: BrokerServer,
                                                     store_url: str) -> None:
    q = qname()
    client = QueueClient(broker.url, q)
    first = client.push_many([{"payload": {"n": i}} for i in range(25)])
    reader = reader_for(broker.url, q, maxJobsPerTrigger="10", rowsPerPartition="4")
    later: list[str] = []
    real_prepare = reader.prepareForTriggerAvailableNow

    def prepare_then_more_arrive() -> None:
        real_prepare()
        later.extend(client.push_many([{"payload": {"n": 100 + i}} for i in range(5)]))

    reader.prepareForTriggerAvailableNow = prepare_then_more_arrive  # type: ignore[method-assign]
    batches = drive_available_now(reader)
    reader.stop()

    assert [len(b) for b in batches] == [10, 10, 5]  # bounded; the run stops by itself
    assert sorted(r[0] for b in batches for r in b) == sorted(first)
    stats = client.stats()
    assert stats["completed_total"] == 25 and stats["counts"]["pending"] == 5
    assert {j["id"] for j in client.iter_jobs("pending")} == set(later)  # not waited for
    ids = wait_archived(store_from_url(store_url), q, 25)
    assert ids == Counter(first)


def test_available_now_on_an_empty_queue_stops_at_once(broker: BrokerServer) -> None:
    q = qname()
    missing = reader_for(broker.url, q)  # never pushed to: a typo, unless told to wait
    with pytest.raises(UnknownQueue, match=f"queue {q!r} does not exist"):
        drive_available_now(missing)
    missing.stop()
    reader = reader_for(broker.url, q, waitForQueue="true")
    assert drive_available_now(reader) == []
    reader.stop()


def test_without_the_hook_a_batch_is_still_bounded(broker: BrokerServer) -> None:
    """PySpark 4.0 / 4.1: ``latestOffset()`` without arguments, no prepare call."""
    q = qname()
    client = QueueClient(broker.url, q)
    client.push_many([{"payload": {"n": i}} for i in range(15)])
    reader = reader_for(broker.url, q, maxJobsPerTrigger="6")
    start = reader.initialOffset()
    end = reader.latestOffset()
    assert len([r for p in reader.partitions(start, end) for r in reader.read(p)]) == 6
    reader.commit(end)
    reader.stop()
    assert client.stats()["completed_total"] == 6


@needs_hook
def test_trigger_once_is_refused_before_anything_is_claimed(broker: BrokerServer) -> None:
    """Spark 4.2+ passes ``ReadAllAvailable`` only under ``trigger(once=True)``, whose
    single batch it never confirms to the source: its jobs would come back after
    every run and never be completed. The reader refuses it and claims nothing."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    q = qname()
    client = QueueClient(broker.url, q)
    client.push_many([{"payload": {"n": i}} for i in range(3)])
    reader = reader_for(broker.url, q)
    with pytest.raises(InvalidRequest, match=r"availableNow=True"):
        reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    reader.stop()
    stats = client.stats()
    assert stats["counts"]["pending"] == 3 and stats["counts"]["claimed"] == 0


@needs_hook
@pytest.mark.spark
def test_a_trigger_once_query_fails_and_leaves_the_queue_as_it_was(
        any_spark: Any, broker: BrokerServer, tmp_path: Path) -> None:
    """A real ``trigger(once=True)`` query: before the fix its one batch took every
    job and stopped without completing any (they came back after ``leaseS``, and
    would after every run). Now it fails naming availableNow, nothing claimed."""
    q = qname()
    client = QueueClient(broker.url, q)
    client.push_many([{"payload": {"n": i}} for i in range(5)])
    df = (any_spark.readStream.format("osqueue").option("broker", broker.url)
          .option("queue", q).load())
    query = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(once=True).start())
    try:
        with pytest.raises(Exception, match=r"availableNow=True"):
            query.awaitTermination(120)
    finally:
        query.stop()
    stats = client.stats()
    assert stats["counts"]["pending"] == 5 and stats["counts"]["claimed"] == 0
    assert stats["completed_total"] == 0


# -- a failed commit: nothing lost, nothing completed twice --------------------------------


def test_last_batch_completes_once_across_a_broker_restart(tmp_path: Path) -> None:
    """Under availableNow the last batch is completed by the final ``latestOffset``.
    The broker goes down after the batch was planned and comes back (a new broker
    on the same store and port) while that call retries: the batch's jobs are
    completed once, none is redelivered, the run ends."""
    store_url, port = f"file://{tmp_path / 'store'}", free_port()
    q = qname()
    first = start_broker(store_url, port=port, lease_s=2)
    client = QueueClient(first.url, q)
    pushed = client.push_many([{"payload": {"n": i}} for i in range(12)])
    reader = reader_for(first.url, q, maxJobsPerTrigger="100", leaseS="6")
    reader.prepareForTriggerAvailableNow()
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    end = reader.latestOffset(start, limit)
    assert len([r for p in reader.partitions(start, end) for r in reader.read(p)]) == 12

    first.stop()  # Spark runs the batch meanwhile; then asks for the next offset
    restarted: list[BrokerServer] = []

    def restart() -> None:
        time.sleep(1.0)  # the outage: the reader's completion retries through it
        restarted.append(start_broker(store_url, port=port, lease_s=2))

    helper = threading.Thread(target=restart)
    helper.start()
    try:
        assert reader.latestOffset(end, limit) == end  # completed; budget spent: the end
    finally:
        helper.join()
        reader.stop()
    try:
        stats = QueueClient(restarted[0].url, q).stats()
        assert stats["completed_total"] == 12 and stats["reclaimed_total"] == 0
        assert stats["total"] == 0
        assert wait_archived(store_from_url(store_url), q, 12) == Counter(pushed)
    finally:
        restarted[0].stop()


def test_a_commit_that_cannot_reach_the_broker_leaves_the_jobs_to_come_back(
        tmp_path: Path) -> None:
    """The broker stays away past the lease: the completion fails (the query would
    fail), the jobs come back to the queue and are completed once, by a later run."""
    store_url, port = f"file://{tmp_path / 'store'}", free_port()
    q = qname()
    first = start_broker(store_url, port=port, lease_s=2)
    client = QueueClient(first.url, q)
    pushed = client.push_many([{"payload": {"n": i}} for i in range(8)])
    opts = {"maxJobsPerTrigger": "100", "leaseS": "1", "timeoutS": "1"}
    reader = reader_for(first.url, q, **opts)
    reader._connect().retry_s = 2.0  # give up soon (the option's default retries a minute)
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    reader.partitions(start, end)
    first.stop()
    with pytest.raises(OsqueueError):
        reader.latestOffset(end, reader.getDefaultReadLimit())
    reader.stop()  # Spark stops the failed query's source

    with start_broker(store_url, port=port, lease_s=2) as second:
        rerun = reader_for(second.url, q, **opts)
        deadline = time.monotonic() + 30
        batches: list[list[tuple[Any, ...]]] = []
        while sum(map(len, batches)) < 8 and time.monotonic() < deadline:
            batches += drive_available_now(rerun)  # runs until the lapsed leases are reclaimed
            time.sleep(0.1)  # a poll interval between runs
        rerun.stop()
        assert sorted(r[0] for b in batches for r in b) == sorted(pushed)
        assert {r[2] for b in batches for r in b} == {2}  # the second delivery of each
        stats = QueueClient(second.url, q).stats()
        assert stats["completed_total"] == 8 and stats["total"] == 0
        assert wait_archived(store_from_url(store_url), q, 8) == Counter(pushed)


# -- real sessions: classic and Connect ----------------------------------------------------


@needs_hook
@pytest.mark.spark
def test_available_now_over_10000_jobs_completes_each_once(any_spark: Any, broker: BrokerServer,
                                                          store_url: str,
                                                          tmp_path: Path) -> None:
    q = qname()
    client = QueueClient(broker.url, q)
    pushed = client.push_many([{"payload": {"n": i}} for i in range(10_000)], batch_size=10_000)
    began = time.monotonic()
    df = (any_spark.readStream.format("osqueue").option("broker", broker.url)
          .option("queue", q).option("maxJobsPerTrigger", "2500")
          .option("rowsPerPartition", "2500").load())
    query = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(600), "the availableNow query did not stop by itself"
    finally:
        query.stop()
    took = time.monotonic() - began
    assert query.exception() is None
    rows = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    assert sum(rows) == 10_000 and max(rows) <= 2500  # bounded micro-batches

    ids = wait_archived(store_from_url(store_url), q, 10_000)
    assert len(ids) == 10_000 and set(ids) == set(pushed)
    assert max(ids.values()) == 1  # no job archived twice
    stats = client.stats()
    assert stats["total"] == 0 and stats["completed_total"] == 10_000
    assert stats["reclaimed_total"] == 0
    print(f"\navailableNow over 10,000 jobs ({type(any_spark).__module__}): {took:.1f} s")


@needs_hook
@pytest.mark.spark
def test_available_now_queue_to_queue_with_batches_longer_than_the_lease(
        any_spark: Any, broker: BrokerServer, tmp_path: Path) -> None:
    """readStream -> a slow step -> writeStream, both osqueue, availableNow: every batch
    outlives its jobs' lease (heartbeats hold them), every row is published once."""
    import pyarrow as pa

    src, dst = qname(), qname()
    client = QueueClient(broker.url, src)
    client.push_many([{"payload": {"n": i}} for i in range(20)])

    def slow(batches: Iterator[Any]) -> Iterator[Any]:
        """Runs in an executor's Python worker (mapInArrow: the same under Connect)."""
        for i, batch in enumerate(batches):
            if i == 0:
                time.sleep(7.0)  # the task outlives three 2 s leases
            payload = batch.column(batch.schema.get_field_index("payload"))
            yield pa.RecordBatch.from_arrays([payload], names=["payload"])

    df = (any_spark.readStream.format("osqueue").option("broker", broker.url)
          .option("queue", src).option("maxJobsPerTrigger", "10").option("leaseS", "2")
          .option("rowsPerPartition", "10").load())
    query = (df.mapInArrow(slow, "payload string").writeStream.format("osqueue")
             .option("broker", broker.url).option("queue", dst)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(300), "the availableNow query did not stop by itself"
    finally:
        query.stop()
    assert query.exception() is None
    published = sorted(j["payload"]["n"] for j in QueueClient(broker.url, dst).iter_jobs())
    assert published == list(range(20))
    stats = client.stats()
    assert stats["completed_total"] == 20 and stats["reclaimed_total"] == 0
    assert stats["total"] == 0
