"""The Spark surface on a real local SparkSession, against an in-process broker."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality

from broker import paths
from broker.http.server import BrokerServer
from broker.model.format.decode import decode_state
from broker.model.job import DEAD, PENDING
from broker.model.state import QueueSettings
from broker.storage import FileStore
from osqueue_spark import RESULT_SCHEMA, QueueClient, process, push_partition, start_broker
from tests.support.spill_store import spilled_jobs

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark-store")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerServer]:
    # (every publish and bulk push goes into segment objects: the by-reference path)
    with start_broker(f"file://{store_dir}", lease_s=30, backoff_base_s=0.05,
                      segment_push_jobs=1) as b:
        yield b


def qname() -> str:
    return f"sq-{uuid.uuid4().hex[:8]}"


def test_read_known_queue_object(any_spark: Any, broker: BrokerServer,
                                 store_dir: Path) -> None:
    spark, q = any_spark, qname()
    c = QueueClient(broker.url, q)
    ids = c.push_many([{"payload": {"n": i, "name": f"x{i}"}, "priority": i} for i in range(3)])
    held = c.claim("reader-test", 1)[0]  # the priority-2 job
    df = (spark.read.format("osqueue").option("store", f"file://{store_dir}")
          .option("queue", q).load())
    got = {r["id"]: r for r in df.collect()}
    assert set(got) == set(ids)
    assert got[held.id]["status"] == "claimed" and got[held.id]["worker"] == "reader-test"
    assert got[ids[0]]["status"] == "pending" and json.loads(got[ids[0]]["payload"]) == {
        "n": 0, "name": "x0"}
    typed = (spark.read.format("osqueue").option("store", f"file://{store_dir}")
             .option("queue", q).option("payloadSchema", "n long, name string").load()
             .select("id", "n", "name").orderBy("id"))
    expected = spark.createDataFrame([(ids[i], i, f"x{i}") for i in range(3)],
                                     "id string, n long, name string")
    assert_df_equality(typed, expected, ignore_nullable=True)


def test_read_bad_options_are_clear(any_spark: Any) -> None:
    """The message names the option and the fix, and the error's code is readable,
    whichever kind of session carried it back."""
    spark = any_spark
    with pytest.raises(Exception, match=r"(?s)option 'store' is required.*"
                                        r"osqueue error code: bad_option"):
        spark.read.format("osqueue").option("queue", "q").load().collect()
    with pytest.raises(Exception, match=r"(?s)option 'table' must be.*"
                                        r"osqueue error code: bad_option"):
        (spark.read.format("osqueue").option("store", "file:///tmp").option("queue", "q")
         .option("table", "nope").load().collect())


def test_a_connect_client_gets_the_data_source_error_itself(spark_connect: Any) -> None:
    """Under Spark Connect the error crosses gRPC: the client gets the osqueue
    error itself (``[code] message`` first), Spark's data source error kept
    under it, whose own message is the osqueue error (type, text, code), and
    the server's JVM stack only after it, as a section the user's
    ``spark.sql.connect.serverStacktrace.enabled`` can turn off."""
    from pyspark.errors import AnalysisException

    from osqueue_spark.datasource.options import OptionError

    with pytest.raises(OptionError) as ours:
        (spark_connect.read.format("osqueue").option("queue", "q")
         .option("token", "s3cret-token").load().collect())
    assert str(ours.value).startswith("[bad_option] option 'store' is required")
    assert "s3cret-token" not in "".join([str(ours.value), *ours.value.__notes__])
    err = ours.value.spark_error  # type: ignore[attr-defined]
    assert isinstance(err, AnalysisException)
    assert err.getCondition() == "PYTHON_DATA_SOURCE_ERROR"
    msg = err.getMessageParameters()["msg"]
    assert "osqueue_spark.datasource.options.OptionError: option 'store' is required" in msg
    assert msg.rstrip().endswith("osqueue error code: bad_option")
    assert "org.apache.spark" not in msg and "s3cret-token" not in str(err)
    text = str(err)
    head = text.split("JVM stacktrace:")[0]
    assert text.splitlines()[0].startswith("[PYTHON_DATA_SOURCE_ERROR] Failed to initialize")
    assert "option 'store' is required" in head and "osqueue error code: bad_option" in head


def test_write_is_exactly_once_under_task_retry(any_spark: Any, broker: BrokerServer,
                                               store_dir: Path) -> None:
    from pyspark.sql import functions as F

    spark, q = any_spark, qname()
    marker = f"/tmp/osq-write-failed-{q}"

    def fail_first_attempt(value: int) -> int:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if (ctx is not None and ctx.partitionId() == 1 and ctx.attemptNumber() == 0
                and value % 2500 == 2000):
            open(marker, "w").close()
            raise RuntimeError("injected task failure after staging part of the partition")
        return value

    flaky = F.udf(fail_first_attempt, "long")
    df = (spark.range(10_000, numPartitions=4)
          .withColumn("n", flaky("id"))
          .select(F.to_json(F.struct("n")).alias("payload"), (F.col("n") % 3).alias("priority")))
    (df.write.format("osqueue").option("broker", broker.url).option("queue", q)
     .option("batchSize", "500").mode("append").save())
    store = FileStore(store_dir)
    state = decode_state(store.read(paths.state_key(q)).data)
    # (rows with priorities are job objects: in the head, or past spill_jobs in
    # pending spill objects it references)
    spilled = spilled_jobs(store, q, PENDING)
    payloads = sorted(json.loads(j.payload)["n"] for j in [*state.jobs.values(), *spilled])
    assert payloads == list(range(10_000))
    assert all(j.status == "pending" for j in state.jobs.values())
    assert not spilled_jobs(store, q, DEAD)
    assert os.path.exists(marker)  # the first attempt failed after staging 4 chunks
    assert FileStore(store_dir).list(f"{q}/staging/") == []  # every chunk was cleaned up


def test_stage_publish_sweep_through_the_broker(broker: BrokerServer, store_dir: Path) -> None:
    q = qname()
    c = QueueClient(broker.url, q)
    assert c.stage("w-1/a", [{"payload": 1}, {"payload": 2, "key": "k"}]) == 2
    assert c.stage("w-1/b", [{"payload": 3}]) == 1
    assert c.stage("w-2/x", [{"payload": 4}]) == 1
    assert c.claim("w", wait_for_queue=True) == []  # staged jobs are not in the queue
    out = c.publish("w-1/", ["w-1/a"], once="write:w-1")
    assert out == {"published": 2, "discarded": 1, "duplicate": False}
    assert c.publish("w-1/", ["w-1/a"], once="write:w-1")["duplicate"]  # a retried commit
    assert c.stats()["total"] == 2
    from broker.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="missing"):
        c.publish("w-3/", ["w-3/never-staged"], once="write:w-3")
    import asyncio

    async def sweep() -> int:
        # Only this queue's ttl, on its own copy of the settings: a new queue's state
        # holds the broker's default QueueSettings object, so setting the field in
        # place would give every later queue of this module's broker a ttl of 0 (a
        # periodic sweep then deletes the staged chunks of a live streaming write).
        inner = broker.broker
        state = inner._queues[q].loop.state
        assert state is not None
        state.settings = dataclasses.replace(state.settings, staged_ttl_s=0.0)
        return await inner.sweep_staging()

    fut = asyncio.run_coroutine_threadsafe(sweep(), broker._loop)  # type: ignore[arg-type]
    assert fut.result(30) == 1  # w-2's chunk: its writer vanished
    assert FileStore(store_dir).list(f"{q}/staging/") == []
    # a queue made afterwards keeps the default ttl: the sweep above was this queue's only
    later = qname()
    QueueClient(broker.url, later).push({"n": 1})
    settings = decode_state(FileStore(store_dir).read(paths.state_key(later)).data).settings
    assert settings.staged_ttl_s == QueueSettings().staged_ttl_s


def test_write_without_payload_column_uses_all_columns(spark: Any, broker: BrokerServer) -> None:
    q = qname()
    df = spark.createDataFrame([(1, "a", 5, "k1"), (2, "b", 0, "k1")],
                               "doc long, name string, priority int, key string")
    df.write.format("osqueue").option("broker", broker.url).option("queue", q).mode(
        "append").save()
    jobs = QueueClient(broker.url, q).jobs()
    assert len(jobs) == 1  # same key: deduped at publish
    assert jobs[0]["payload"] in ({"doc": 1, "name": "a"}, {"doc": 2, "name": "b"})
    assert jobs[0]["key"] == "k1"


def test_write_struct_and_map_payloads(any_spark: Any, broker: BrokerServer) -> None:
    from pyspark.sql import functions as F

    spark, q = any_spark, qname()
    df = spark.range(3).select(F.struct(F.col("id").alias("n"), F.lit("x").alias("s"))
                               .alias("payload"), F.lit(2).alias("max_attempts"))
    df.write.format("osqueue").option("broker", broker.url).option("queue", q).mode(
        "append").save()
    q2 = qname()
    maps = spark.range(2).select(F.create_map(F.lit("k"), F.col("id")).alias("payload"))
    maps.write.format("osqueue").option("broker", broker.url).option("queue", q2).mode(
        "append").save()
    jobs = QueueClient(broker.url, q).jobs()
    assert sorted(j["payload"]["n"] for j in jobs) == [0, 1, 2]
    assert all(j["payload"]["s"] == "x" and j["max_attempts"] == 2 for j in jobs)
    assert sorted(j["payload"]["k"] for j in QueueClient(broker.url, q2).jobs()) == [0, 1]


def test_write_json_text_with_option_columns_and_line_breaks(spark: Any,
                                                             broker: BrokerServer) -> None:
    q = qname()
    df = spark.createDataFrame(
        [('{\n  "n": 1\n}', 7, None), ('{"n": 2}', None, "k"), ('{"n": 3}', None, "k")],
        "payload string, priority int, key string")
    df.write.format("osqueue").option("broker", broker.url).option("queue", q).mode(
        "append").save()
    jobs = sorted(QueueClient(broker.url, q).jobs(), key=lambda j: j["payload"]["n"])
    assert [j["payload"]["n"] for j in jobs] in ([1, 2], [1, 3])  # one of the keyed rows
    assert jobs[0]["priority"] == 7 and jobs[1]["priority"] == 0 and jobs[1]["key"] == "k"


def test_write_rejects_overwrite_and_bad_json(any_spark: Any, broker: BrokerServer) -> None:
    df = any_spark.createDataFrame([("not json",)], "payload string")
    with pytest.raises(Exception, match=r"(?s)only appends.*osqueue error code: invalid_request"):
        df.write.format("osqueue").option("broker", broker.url).option("queue", "x").mode(
            "overwrite").save()
    q = qname()
    with pytest.raises(Exception, match=r"(?s)were refused.*payload is not valid JSON.*"
                                        r"osqueue error code: invalid_request"):
        df.write.format("osqueue").option("broker", broker.url).option("queue", q).mode(
            "append").save()
    from broker.errors import UnknownQueue

    with pytest.raises(UnknownQueue):  # nothing was published, not even the queue
        QueueClient(broker.url, q).stats()


_SEEN = "/tmp/osq-fp-seen"


def test_foreach_partition_retry_has_no_duplicates(any_spark: Any,
                                                   broker: BrokerServer) -> None:
    """Partition 0's first attempt pushes half its rows and dies; the retry sees the
    rows in another order (as after a shuffle). Every row is pushed once, and rows
    with identical content stay separate jobs."""
    from collections import Counter

    from pyspark.sql import functions as F

    q = qname()
    marker = f"{_SEEN}-{q}"
    push = push_partition(broker=broker.url, queue=q, batch_size=50)

    def flaky_push(rows: Any) -> None:
        from pyspark import TaskContext

        rows = list(rows)
        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            push(iter(rows[:len(rows) // 2]))  # half is pushed, then the task dies
            open(marker, "w").close()
            raise RuntimeError("injected failure halfway through the push")
        if ctx.partitionId() == 0:
            rows.reverse()  # the retry gets its rows in another order
        push(iter(rows))

    df = any_spark.range(1000, numPartitions=3).select(
        F.to_json(F.struct((F.col("id") % 500).alias("n"))).alias("payload"))
    df.foreachPartition(flaky_push)
    assert os.path.exists(marker)
    client = QueueClient(broker.url, q)
    stats = client.stats()
    assert stats["total"] == 1000 and stats["enqueued_total"] == 1000
    counts = Counter(j["payload"]["n"] for j in client.iter_jobs())
    assert counts == dict.fromkeys(range(500), 2)  # each content twice, as in the input


def work(payload: dict[str, Any]) -> dict[str, Any]:
    if payload.get("slow_s"):  # outlasts its lease: only the worker's heartbeats keep it
        import time

        time.sleep(payload["slow_s"])
    if payload.get("poison"):
        raise ValueError(f"cannot handle {payload['n']}")
    return {"square": payload["n"] ** 2}


def test_process_completes_retries_and_dead_letters(any_spark: Any,
                                                    broker: BrokerServer) -> None:
    """Completes, retries and dead-letters; job 1 runs 2.5 leases long and is still
    completed on its first attempt, because the task's heartbeats hold its lease."""
    q = qname()
    c = QueueClient(broker.url, q)
    c.create(max_attempts=2, backoff_base_s=0.05)
    c.push_many([{"payload": {"n": n, "poison": n % 10 == 0, "slow_s": 2.5 * (n == 1)}}
                 for n in range(100)])
    fn = process(work, broker=broker.url, queue=q, batch_size=8, idle_s=2.0, lease_s=1.0)
    began = datetime.now()  # Spark hands timestamps back as naive local times
    out = any_spark.range(4).repartition(4).mapInPandas(fn, RESULT_SCHEMA).collect()
    ended = datetime.now()
    assert all(began <= r["started"] <= r["finished"] <= ended for r in out)
    by_status: dict[str, list[Any]] = {}
    for r in out:
        by_status.setdefault(r["status"], []).append(r)
    assert len(by_status["completed"]) == 90 and "lost" not in by_status
    slow = next(r for r in by_status["completed"] if json.loads(r["result"])["square"] == 1)
    assert slow["attempts"] == 1 and (slow["finished"] - slow["started"]).total_seconds() >= 2.5
    assert len(by_status["failed"]) == 10 and len(by_status["dead"]) == 10
    assert all("ValueError: cannot handle" in r["error"] for r in by_status["dead"])
    assert all("Traceback" in r["error"] for r in by_status["dead"])
    assert {json.loads(r["result"])["square"] for r in by_status["completed"]} == {
        n * n for n in range(100) if n % 10}
    stats = c.stats()
    assert stats["total"] == 10 and stats["counts"]["dead"] == 10
    assert stats["completed_total"] == 90


def test_worker_budget_claims_nothing_beyond_it(broker: BrokerServer) -> None:
    """The next batch is claimed while one is completed; never past max_jobs."""
    from osqueue_spark.workers import ProcessConfig, run_worker

    q = qname()
    c = QueueClient(broker.url, q)
    c.push_many(range(10))
    cfg = ProcessConfig(broker.url, q, batch_size=2, idle_s=0.2, max_jobs=5)
    rows = list(run_worker(lambda p: p * 10, cfg))
    assert [r[1] for r in rows] == ["completed"] * 5
    assert sorted(json.loads(r[3]) for r in rows) == [0, 10, 20, 30, 40]
    assert c.stats()["total"] == 5 and c.stats()["counts"]["pending"] == 5
    rest = list(run_worker(lambda p: p, ProcessConfig(broker.url, q, batch_size=4, idle_s=0.2)))
    assert sorted(json.loads(r[3]) for r in rest) == [5, 6, 7, 8, 9]
    assert c.stats()["total"] == 0


def test_worker_killed_mid_job_loses_nothing(broker: BrokerServer) -> None:
    q = qname()
    c = QueueClient(broker.url, q)
    jid = c.push({"n": 7})
    code = (
        "import os, sys\n"
        "from osqueue_spark import QueueClient\n"
        "from osqueue_spark.workers import ProcessConfig, run_worker\n"
        f"cfg = ProcessConfig({broker.url!r}, {q!r}, lease_s=1.0, idle_s=0.5)\n"
        "def die(payload):\n"
        "    print('claimed', flush=True)\n"
        "    os.kill(os.getpid(), 9)\n"
        "list(run_worker(die, cfg))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL and "claimed" in proc.stdout
    assert c.stats()["counts"]["claimed"] == 1
    again = c.claim("rescuer", wait_s=20)  # after the 1 s lease the job comes back
    assert [j.id for j in again] == [jid] and again[0].attempt == 2
    c.complete(again[0].token, {"rescued": True})


def test_claim_one_context_manager(broker: BrokerServer) -> None:
    from osqueue_spark.workers import claim_one

    q = qname()
    c = QueueClient(broker.url, q)
    ok, bad = c.push({"n": 1}), c.push({"n": 2})
    with claim_one(c, "me", lease_s=0.6) as ctx:
        assert ctx is not None and ctx.job.id == ok
        import time as _t

        _t.sleep(1.5)  # longer than the lease: only the heartbeat keeps it
        ctx.result = {"done": 1}
    with pytest.raises(ZeroDivisionError), claim_one(c, "me") as ctx2:
        assert ctx2 is not None and ctx2.job.id == bad
        1 / 0  # noqa: B018
    stats = c.stats()
    assert stats["completed_total"] == 1 and stats["counts"]["pending"] == 1
    assert "ZeroDivisionError" in c.job(bad)["last_error"]  # (jobs() may list the done one)
    with claim_one(QueueClient(broker.url, qname()), "me", wait_for_queue=True) as nothing:
        assert nothing is None


def test_streaming_write_exactly_once_across_restart(any_spark: Any, broker: BrokerServer,
                                                    tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    spark = any_spark
    q = qname()
    src = tmp_path / "in"
    src.mkdir()
    ckpt = str(tmp_path / "ckpt")

    def run_once() -> None:
        stream = (spark.readStream.schema("n long").json(str(src))
                  .select(F.to_json(F.struct("n")).alias("payload")))
        query = (stream.writeStream.format("osqueue").option("broker", broker.url)
                 .option("queue", q).option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)

    (src / "a.json").write_text("\n".join(json.dumps({"n": i}) for i in range(50)))
    run_once()
    (src / "b.json").write_text("\n".join(json.dumps({"n": i}) for i in range(50, 80)))
    run_once()  # a restarted query from the same checkpoint
    run_once()  # nothing new: nothing added
    jobs = list(QueueClient(broker.url, q).iter_jobs())
    assert sorted(j["payload"]["n"] for j in jobs) == list(range(80))


def test_streaming_write_needs_an_identity(spark: Any, broker: BrokerServer) -> None:
    from broker.errors import InvalidRequest
    from osqueue_spark.datasource.options import StreamWriteOptions

    with pytest.raises(InvalidRequest, match="checkpointLocation"):
        StreamWriteOptions.parse({"broker": broker.url, "queue": "q"})


def test_streaming_read_completes_on_commit_and_survives_restart(
        any_spark: Any, broker: BrokerServer, tmp_path: Path) -> None:
    spark, q = any_spark, qname()
    c = QueueClient(broker.url, q)
    c.push_many([{"payload": {"n": i}} for i in range(30)])
    ckpt = str(tmp_path / "ckpt")
    out = str(tmp_path / "out")

    def start() -> Any:
        df = (spark.readStream.format("osqueue").option("broker", broker.url)
              .option("queue", q).option("maxJobsPerTrigger", "10").option("leaseS", "2")
              .load())
        return (df.writeStream.format("parquet").option("path", out)
                .option("checkpointLocation", ckpt).trigger(processingTime="200 milliseconds")
                .start())

    query = start()
    deadline = datetime.now(UTC) + timedelta(seconds=120)
    while c.stats()["completed_total"] < 10 and datetime.now(UTC) < deadline:
        query.awaitTermination(0.5)
    query.stop()  # stops mid-stream; claimed but uncommitted jobs come back by lease
    first = c.stats()["completed_total"]
    assert first >= 10
    query = start()
    while c.stats()["completed_total"] < 30 and datetime.now(UTC) < deadline:
        query.awaitTermination(0.5)
    query.stop()
    stats = c.stats()
    assert stats["completed_total"] == 30 and stats["total"] == 0
    seen = {json.loads(r["payload"])["n"] for r in spark.read.parquet(out).collect()}
    assert seen == set(range(30))


# The session helpers, a test per kind: a test taking both sessions ran on the Connect
# worker and started a second JVM there (tests/support/scheduling.py).
def test_session_helpers_tell_a_classic_session(spark: Any) -> None:
    from osqueue_spark.session import is_connect, sql_functions

    assert not is_connect(spark)
    assert sql_functions(spark).__name__ == "pyspark.sql.functions"


def test_session_helpers_tell_a_connect_session(spark_connect: Any) -> None:
    """Outside ``any_spark`` this process is not in Connect mode, so plain
    ``pyspark.sql.functions`` build classic columns, which a Connect DataFrame
    refuses; the pipelines ask the session which functions to use."""
    from osqueue_spark.pipelines.common import documents
    from osqueue_spark.session import is_connect, sql_functions

    assert os.environ.get("SPARK_CONNECT_MODE_ENABLED") is None  # (not in Connect mode)
    assert is_connect(spark_connect)
    assert sql_functions(spark_connect).__name__ == "pyspark.sql.connect.functions"
    docs = documents(spark_connect, 5, partitions=2).where("doc = 3").collect()
    assert [(r["doc"], r["text"].split()[:2], r["poison"]) for r in docs] == [
        (3, ["document", "3"], False)]
