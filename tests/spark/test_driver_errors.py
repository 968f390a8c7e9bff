"""How an osqueue error raised inside Spark reaches the driver: the rule that finds
it in Spark's text (pure), and a real local SparkSession's refused write, read
of a missing queue and process() worker of a missing queue, each raising the
osqueue error itself (``[code] message`` first), the store unchanged."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker import paths
from broker.errors import InvalidRequest, NotFound, OsqueueError, PayloadTooLarge, UnknownQueue
from broker.http.server import BrokerServer
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import RESULT_SCHEMA, QueueClient, process, start_broker
from osqueue_spark.datasource.driver_errors import osqueue_error_in, surfaced
from osqueue_spark.datasource.options import OptionError

WORKER_TEXT = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/x/osqueue_spark/datasource/errors.py", line 62, in call
    raise
  File "/x/osqueue_spark/datasource/writer.py", line 98, in send
    raise type(exc)(f"rows {first}-{first + n - 1} of task {task} were refused, "
broker.errors.PayloadTooLarge: rows 0-9 of task p1-t1 were refused, nothing of them staged: \
staged line 3: payload is 300000 bytes; this queue's limit is 262144 bytes
osqueue error code: payload_too_large
"""

PLANNING_TEXT = """[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source read: \
Traceback (most recent call last):
  File "/x/osqueue_spark/datasource/reader.py", line 160, in partitions
    raise missing_queue(store, self.opts.queue)
broker.errors.UnknownQueue: queue 'typo' does not exist in file:///data SQLSTATE: 38000"""

OPTION_TEXT = """Traceback (most recent call last):
  File "/x/osqueue_spark/datasource/options.py", line 50, in _req
osqueue_spark.datasource.options.OptionError: option 'store' is required
osqueue error code: bad_option
"""

USER_ERROR_TEXT = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/x/osqueue_spark/client.py", line 10, in push
broker.errors.QueueFull: queue full
osqueue error code: queue_full

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/user.py", line 3, in fn
ValueError: the user's own error
"""


@pytest.mark.parametrize(("text", "cls", "message"), [
    (WORKER_TEXT, PayloadTooLarge, "rows 0-9 of task p1-t1 were refused, nothing of them "
     "staged: staged line 3: payload is 300000 bytes; this queue's limit is 262144 bytes"),
    (PLANNING_TEXT, UnknownQueue, "queue 'typo' does not exist in file:///data"),
    (OPTION_TEXT, OptionError, "option 'store' is required"),
])
def test_the_final_osqueue_error_of_sparks_text_is_found(
        text: str, cls: type[OsqueueError], message: str) -> None:
    found = osqueue_error_in(text)
    assert type(found) is cls and found.message == message


@pytest.mark.parametrize("text", [
    USER_ERROR_TEXT,  # the task died of the user's error, after an osqueue one
    "Job aborted due to stage failure: java.lang.OutOfMemoryError",
    "Traceback (most recent call last):\n  File \"x\"\nKeyError: 'broker.errors.X: y'\n",
])
def test_text_whose_final_error_is_not_osqueues_gives_none(text: str) -> None:
    assert osqueue_error_in(text) is None


def test_the_driver_error_starts_with_the_code_and_keeps_sparks_text() -> None:
    spark_error = RuntimeError(WORKER_TEXT)
    ours = surfaced(spark_error)
    assert isinstance(ours, PayloadTooLarge)
    assert str(ours).startswith("[payload_too_large] rows 0-9 of task p1-t1 were refused")
    assert ours.__notes__ == [f"Spark's error (RuntimeError): {WORKER_TEXT}"]
    assert ours.spark_error is spark_error  # type: ignore[attr-defined]
    assert surfaced(RuntimeError("no osqueue here")) is None
    assert surfaced(InvalidRequest("already ours")) is None


# -- on a real local SparkSession ---------------------------------------------------------

spark_only = pytest.mark.spark


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("driver-errors-store")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerServer]:
    with start_broker(f"file://{store_dir}") as b:
        yield b


def contents(store_dir: Path, queue: str) -> tuple[dict[str, bytes], list[str]]:
    """What a queue holds: its jobs (id -> payload) and every object under it but
    its head (staging, segments, archive). The head's bytes change on their own
    (the owner renews its lease in it), so they are not compared whole."""
    store = FileStore(store_dir)
    try:
        state = decode_state(store.read(paths.state_key(queue)).data)
        jobs = {job.id: job.payload for job in state.jobs.values()}
    except NotFound:
        jobs = {}
    return jobs, [k for k in store.list(f"{queue}/") if k != paths.state_key(queue)]


def qname() -> str:
    return f"de-{uuid.uuid4().hex[:8]}"


@spark_only
def test_a_refused_write_raises_the_brokers_error_and_leaves_the_store_as_it_was(
        any_spark: Any, broker: BrokerServer, store_dir: Path) -> None:
    """It raised ``Py4JJavaError: An error occurred while calling o50.save`` (or
    Spark's "An exception was thrown from the Python worker:") with the cause
    last, on a classic session and under Spark Connect. The other partitions'
    staged chunks are discarded by the abort."""
    spark, q = any_spark, qname()
    QueueClient(broker.url, q).push({"seed": 1})
    before = contents(store_dir, q)
    rows = [(f'{{"n": {i}}}',) for i in range(40)]
    rows[33] = ('"' + "x" * 300_000 + '"',)  # over the 256 KiB payload limit
    df = spark.createDataFrame(rows, "payload string").repartition(4)
    with pytest.raises(PayloadTooLarge) as info:
        (df.write.format("osqueue").option("broker", broker.url).option("queue", q)
         .option("batchSize", "3").mode("append").save())
    first = str(info.value).splitlines()[0]
    assert first.startswith("[payload_too_large] rows "), first
    assert "were refused, nothing of them staged" in first
    assert contents(store_dir, q) == before  # no job published, no staged chunk left


@spark_only
def test_a_read_of_a_missing_queue_names_it_and_the_store(spark: Any, store_dir: Path) -> None:
    """It returned 0 rows, as for an empty queue."""
    q, store = qname(), f"file://{store_dir}"

    def read(**options: str) -> Any:
        reader = spark.read.format("osqueue").option("store", store).option("queue", q)
        for name, value in options.items():
            reader = reader.option(name, value)
        return reader.load()

    with pytest.raises(UnknownQueue) as info:
        read().count()
    assert str(info.value).startswith(f"[unknown_queue] queue {q!r} does not exist in {store}")
    assert read(missingQueue="empty").count() == 0
    with pytest.raises(UnknownQueue):
        read(table="archive").count()
    assert read(table="archive", missingQueue="EMPTY").count() == 0
    with pytest.raises(OptionError, match="option 'missingQueue' must be one of"):
        read(missingQueue="ignore").count()


@spark_only
def test_process_workers_of_a_missing_queue_fail_fast_unless_told_to_wait(
        spark: Any, broker: BrokerServer, store_dir: Path) -> None:
    """Each worker claimed [] and idled idle_s, for ever at a typo."""
    q = qname()
    workers = spark.range(2).repartition(2)
    with pytest.raises(UnknownQueue, match=rf"^\[unknown_queue\] queue {q!r} does not exist"):
        workers.mapInPandas(process(lambda p: p, broker=broker.url, queue=q, idle_s=30),
                            RESULT_SCHEMA).collect()
    waited = workers.mapInPandas(process(lambda p: p, broker=broker.url, queue=q, idle_s=0.2,
                                         wait_for_queue=True), RESULT_SCHEMA).collect()
    assert waited == []
    assert contents(store_dir, q) == ({}, [])  # nothing made


@spark_only
def test_a_stream_of_a_missing_queue_fails_naming_it(spark: Any, broker: BrokerServer,
                                                     tmp_path: Path) -> None:
    """It claimed nothing, batch after batch, for ever. The query fails at its first
    batch; Spark's StreamingQueryException stays (streams keep Spark's type) and
    names the queue."""
    q = qname()
    query = (spark.readStream.format("osqueue").option("broker", broker.url)
             .option("queue", q).load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="1 second").start())
    try:
        with pytest.raises(Exception, match=rf"(?s)UnknownQueue: queue {q!r} does not exist"):
            query.awaitTermination(120)
    finally:
        query.stop()
