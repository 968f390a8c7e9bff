"""Building blocks of the example pipelines (``jobs/``, ``notebooks/``, ``make demo``).

Each step is a plain function over a SparkSession so the spark-submit jobs,
the notebooks and the demo share one implementation.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from osqueue_spark.client import QueueClient
from osqueue_spark.embedded import start_broker
from osqueue_spark.pipelines.notebook import on_databricks, secret
from osqueue_spark.session import sql_functions
from osqueue_spark.workers import RESULT_SCHEMA, process

log = logging.getLogger("osqueue.pipelines")


def documents(spark: Any, n: int, partitions: int = 8) -> Any:
    """A DataFrame of ``n`` synthetic documents to process (id, text, poison flag)."""
    F = sql_functions(spark)

    return (spark.range(n, numPartitions=partitions)
            .select(F.col("id").alias("doc"),
                    F.concat_ws(" ", F.lit("document"), F.col("id").cast("string"),
                                F.sha2(F.col("id").cast("string"), 256)).alias("text"),
                    (F.col("id") % 1000 == 999).alias("poison")))


def enqueue(df: Any, broker: str, queue: str, token: str | None = None) -> None:
    """``df.write.format("osqueue")``: every row becomes a job, exactly once."""
    writer = df.write.format("osqueue").option("broker", broker).option("queue", queue)
    if token:
        writer = writer.option("token", token)
    writer.mode("append").save()


def analyse(payload: dict[str, Any]) -> dict[str, Any]:
    """The demo's real work: word statistics and a digest of the document text.

    Documents flagged ``poison`` always fail (they end dead-lettered); one in
    a hundred fails half the time, like a flaky dependency (retries pass).
    """
    text = str(payload["text"])
    if payload.get("poison"):
        raise ValueError(f"document {payload['doc']} is malformed")
    digest = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    if int(digest[:4], 16) % 100 == 0 and random.random() < 0.5:
        raise TimeoutError(f"transient failure on document {payload['doc']}")
    words = text.split()
    return {"doc": payload["doc"], "words": len(words),
            "longest": max(len(w) for w in words), "digest": digest}


def process_queue(spark: Any, broker: str, queue: str, workers: int, fn: Any = analyse,
                  token: str | None = None, idle_s: float = 3.0, batch_size: int = 200,
                  wait_for_queue: bool = False) -> Any:
    """Run ``workers`` mapInPandas tasks over the queue; return the result rows DataFrame."""

    f = process(fn, broker=broker, queue=queue, token=token, batch_size=batch_size,
                idle_s=idle_s, lease_s=60, wait_for_queue=wait_for_queue)
    return spark.range(workers, numPartitions=workers).mapInPandas(f, RESULT_SCHEMA)


def broker_for(args: Any) -> Any:
    """The broker URL from ``--broker``, or an embedded broker on ``--store`` (a context).

    The embedded broker takes ``args.token`` and sets it to the token it wants
    (one it generated when it listens beyond loopback on a cluster's driver).
    """


    if args.broker:
        return nullcontext(args.broker)

    @contextmanager
    def embedded() -> Iterator[str]:
        with start_broker(args.store, token=args.token) as broker:
            # On a cluster's driver the broker wants a token (generated if none was
            # given): the job's Spark options and clients take it from args.token.
            args.token = broker.token
            print(f"(embedded broker at {broker.url} on {args.store})", file=sys.stderr)
            yield broker.url

    return embedded()


def job_args(description: str) -> Any:
    """The command-line options every example job takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--broker", default=os.environ.get("OSQUEUE_BROKER"),
                   help="broker URL (default: an embedded broker on --store)")
    p.add_argument("--store", default=os.environ.get("OSQUEUE_STORE", "file:///tmp/osqueue-jobs"),
                   help="store URL (file:///abs/dir or s3://bucket/prefix)")
    p.add_argument("--queue", default="docs")
    p.add_argument("--token", default=os.environ.get("OSQUEUE_TOKEN"),
                   help="broker bearer token (prefer --token-secret or OSQUEUE_TOKEN: "
                        "a command line is visible to other users)")
    p.add_argument("--token-secret", metavar="SCOPE/KEY", dest="token", action=_TokenSecret,
                   help="read the token from a Databricks secret (dbutils.secrets.get)")
    p.add_argument("--remote", default=os.environ.get("SPARK_REMOTE"),
                   help="run under Spark Connect: the server's URL, e.g. sc://host:15002 "
                        "(default: $SPARK_REMOTE, else a local classic session)")
    return p


class _TokenSecret(argparse.Action):
    """``--token-secret scope/key``: store ``dbutils.secrets.get(scope, key)`` as the token."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:

        scope, _, key = str(values).partition("/")
        if not scope or not key:
            parser.error(f"--token-secret wants SCOPE/KEY, got {values!r}")
        if not on_databricks():
            parser.error("--token-secret reads a Databricks secret and this is not Databricks "
                         "(no DATABRICKS_RUNTIME_VERSION); pass --token or set OSQUEUE_TOKEN")
        try:
            setattr(namespace, self.dest, secret(scope, key))
        except ValueError as exc:
            parser.error(str(exc))


@contextmanager
def progress(client: QueueClient, every_s: float = 2.0, total: int | None = None,
             out: Any = None) -> Iterator[None]:
    """Print queue progress every ``every_s`` seconds while the block runs."""
    out = out or sys.stdout
    stop = threading.Event()
    start = time.monotonic()
    base = client.stats()["completed_total"]

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                s = client.stats()
            except Exception as exc:  # progress is best effort
                print(f"  (progress unavailable: {exc})", file=out)
                continue
            done = s["completed_total"] - base
            rate = done / max(1e-9, time.monotonic() - start)
            tail = f" of {total:,}" if total else ""
            c = s["counts"]
            print(f"  {time.monotonic() - start:6.1f}s  completed {done:,}{tail}  "
                  f"pending {c['pending']:,}  claimed {c['claimed']:,}  dead {c['dead']:,}  "
                  f"{rate:,.0f} jobs/s", file=out, flush=True)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def archive_report(spark: Any, store: str, queue: str) -> Any:
    """A summary DataFrame of completed jobs by hour: count, attempts, mean words
    (cancelled jobs, in the archive too, are left out)."""
    F = sql_functions(spark)

    df = (spark.read.format("osqueue").option("store", store).option("queue", queue)
          .option("table", "archive").load())
    return (df.where(F.col("status") == "completed")
            .withColumn("hour", F.date_trunc("hour", "completed_at"))
            .groupBy("hour")
            .agg(F.count("*").alias("completed"),
                 F.sum(F.when(F.col("attempts") > 1, 1).otherwise(0)).alias("retried"),
                 F.avg(F.get_json_object("result", "$.words").cast("double")).alias("avg_words"))
            .orderBy("hour"))
