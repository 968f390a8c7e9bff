"""The Spark half of ``make demo``: 100,000 jobs from a DataFrame through mapInPandas workers."""

from __future__ import annotations

import os
import time
from pathlib import Path

from osqueue_spark.client import QueueClient
from osqueue_spark.embedded import start_broker
from osqueue_spark.pipelines.common import (
    archive_report,
    documents,
    enqueue,
    process_queue,
    progress,
)
from osqueue_spark.session import local_session

QUEUE = "demo-docs"


def spark_story(store_dir: Path, jobs: int | None = None, workers: int = 4) -> dict[str, float]:
    jobs = jobs or int(os.environ.get("OSQUEUE_DEMO_JOBS", "100000"))
    store = f"file://{store_dir}"
    print(f"\n== spark: a local SparkSession and an in-process broker on {store}")
    spark = local_session("osqueue-demo")
    with start_broker(store, max_attempts=3, backoff_base_s=0.2) as broker:
        client = QueueClient(broker.url, QUEUE)
        print(f"== enqueue {jobs:,} documents with df.write.format('osqueue') (exactly once)")
        t0 = time.perf_counter()
        enqueue(documents(spark, jobs), broker.url, QUEUE)
        t_enq = time.perf_counter() - t0
        stats = client.stats()
        print(f"   enqueued {stats['counts']['pending']:,} jobs in {t_enq:.1f}s "
              f"({jobs / t_enq:,.0f} rows/s); queue object {stats['state_bytes'] / 1e6:.1f} MB")

        print(f"== process them with {workers} mapInPandas workers (heartbeats, retries, "
              "dead letters)")
        t1 = time.perf_counter()
        with progress(client, every_s=2.0, total=jobs):
            results = process_queue(spark, broker.url, QUEUE, workers, idle_s=1.0).cache()
            rows = results.count()
        t_proc = time.perf_counter() - t1
        by_status = {r["status"]: r["count"] for r in results.groupBy("status").count().collect()}
        stats = client.stats()
        print("== summary")
        print(f"   processed {rows:,} attempts in {t_proc:.1f}s "
              f"({stats['completed_total'] / t_proc:,.0f} jobs/s)")
        print(f"   completed {stats['completed_total']:,}   retried "
              f"{by_status.get('failed', 0):,} attempt(s)   dead {stats['counts']['dead']:,}")
        dead = client.jobs(status="dead", limit=3)
        for job in dead:
            print(f"   dead: {job['id']} after {job['attempts']} attempts: "
                  f"{(job.get('last_error') or '').splitlines()[0]}")
    print("== the archive, read back with spark.read.format('osqueue').option('table', 'archive')")
    report = archive_report(spark, store, QUEUE)
    report.show(truncate=False)
    archived = (spark.read.format("osqueue").option("store", store).option("queue", QUEUE)
                .option("table", "archive").load().count())
    print(f"   {archived:,} completed jobs in the archive")
    spark.stop()
    return {"jobs": jobs, "enqueue_s": t_enq, "process_s": t_proc,
            "completed": stats["completed_total"], "dead": stats["counts"]["dead"]}
