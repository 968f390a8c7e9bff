"""Spark benchmark: osqueue next to plain Spark, side by side in one run.

    .venv/bin/python bench/spark_bench.py [--rows 1000000] [--jobs 100000] [--workers 2]

1. rows/s of ``df.write.format("osqueue")`` (exactly-once staging + publish,
   embedded broker on a local-file store) next to ``df.write.json`` of the
   same DataFrame to local disk;
2. jobs/s of ``process()`` over no-op jobs (claim batches, heartbeats,
   completes) next to a plain ``mapInPandas`` no-op over the same number of rows.

Prints a table and writes bench/results/spark_bench.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import write_results
from osqueue_spark import RESULT_SCHEMA, QueueClient, process, start_broker
from osqueue_spark.pipelines import local_session


def noop(payload: Any) -> None:
    return None


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=5000, help="rows per staged chunk")
    p.add_argument("--claim-batch", type=int, default=2000, help="jobs per claim in process()")
    args = p.parse_args()

    from pyspark.sql import functions as F

    spark = local_session("osqueue-bench", cores=args.workers)
    tmp = Path(tempfile.mkdtemp(prefix="osq-spark-bench-"))
    df = (spark.range(args.rows, numPartitions=args.partitions)
          .select(F.to_json(F.struct(F.col("id").alias("doc"),
                                     F.concat(F.lit("s3://bucket/docs/"), F.col("id"),
                                              F.lit(".json")).alias("path"))).alias("payload"))
          .cache())
    df.count()  # materialise once so both writes read the same cached rows
    results: dict[str, Any] = {"rows": args.rows, "jobs": args.jobs, "workers": args.workers}

    t_json = timed(lambda: df.write.mode("overwrite").json(str(tmp / "json")))
    with start_broker(f"file://{tmp / 'store'}") as broker:
        t_osq = timed(lambda: df.write.format("osqueue").option("broker", broker.url)
                      .option("queue", "bench-write")
                      .option("batchSize", str(args.batch_size)).mode("append").save())
        enq = QueueClient(broker.url, "bench-write").stats()
        assert enq["counts"]["pending"] == args.rows, enq["counts"]
    results["write"] = {"json_s": t_json, "osqueue_s": t_osq,
                        "json_rows_per_s": args.rows / t_json,
                        "osqueue_rows_per_s": args.rows / t_osq,
                        "ratio": t_json / t_osq}
    print(f"write {args.rows:,} rows: df.write.json {args.rows / t_json:>10,.0f} rows/s   "
          f"osqueue {args.rows / t_osq:>10,.0f} rows/s   ratio {t_json / t_osq:.3f}", flush=True)

    jobs_df = spark.range(args.jobs, numPartitions=args.workers).cache()
    jobs_df.count()

    def bare(batches: Any) -> Any:
        import pandas as pd

        for pdf in batches:
            yield pd.DataFrame({"id": pdf["id"].astype(str), "status": "completed"})

    t_bare = timed(lambda: jobs_df.mapInPandas(bare, "id string, status string")
                   .write.format("noop").mode("overwrite").save())
    with start_broker(f"file://{tmp / 'store2'}") as broker:
        client = QueueClient(broker.url, "bench-process")
        client.push_many(({"payload": {"n": i}} for i in range(args.jobs)), batch_size=5000)
        fn = process(noop, broker=broker.url, queue="bench-process",
                     batch_size=args.claim_batch, idle_s=0.5, lease_s=120)
        workers = spark.range(args.workers, numPartitions=args.workers)
        t_proc = timed(lambda: workers.mapInPandas(fn, RESULT_SCHEMA)
                       .write.format("noop").mode("overwrite").save())
        done = client.stats()["completed_total"]
        assert done == args.jobs, done
    results["process"] = {"bare_s": t_bare, "process_s": t_proc,
                          "bare_rows_per_s": args.jobs / t_bare,
                          "process_jobs_per_s": args.jobs / t_proc,
                          "ratio": t_bare / t_proc}
    print(f"process {args.jobs:,} no-op jobs: bare mapInPandas {args.jobs / t_bare:>10,.0f} "
          f"rows/s   process() {args.jobs / t_proc:>10,.0f} jobs/s   ratio {t_bare / t_proc:.3f}")
    path = write_results("spark_bench", results)
    print(f"results written to {path}")
    spark.stop()


if __name__ == "__main__":
    main()
