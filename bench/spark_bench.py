"""Spark benchmark: osqueue next to plain Spark, side by side in one run.

    .venv/bin/python bench/spark_bench.py [--rows 1000000] [--jobs 100000] [--workers 2]

1. rows/s of ``df.write.format("osqueue")`` (exactly-once staging + publish,
   embedded broker on a local-file store) next to ``df.write.json`` of the
   same DataFrame to local disk;
2. jobs/s of ``process()`` over no-op jobs (claim batches, heartbeats,
   completes; burst-mode workers) next to a plain ``mapInPandas`` no-op over
   the same number of rows, once for each claim batch size (2,000 and 10,000).

After an untimed warm-up, the pairs run in interleaved rounds, in one Spark
session (each osqueue write on a fresh broker and store), which of the pair runs
first turning each round; the round with the median ratio is quoted, and every
round is kept with the machine's load after it.

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

from bench._common import load, write_results
from osqueue_spark import RESULT_SCHEMA, QueueClient, process, start_broker
from osqueue_spark.session import local_session


def noop(payload: Any) -> None:
    return None


def _broker_kwargs(tune_gc: bool) -> dict[str, Any]:
    """``tune_gc`` only when asked: checkouts from before it existed tuned the
    driver's GC whenever a broker was embedded."""
    return {"tune_gc": True} if tune_gc else {}


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def write_round(spark: Any, df: Any, tmp: Path, n: int, batch_size: int,
                tune_gc: bool = False) -> dict[str, Any]:
    """One ``df.write.json`` and one ``df.write.format("osqueue")`` (fresh broker and
    store); the osqueue write first in odd rounds."""
    def json_write() -> float:
        return timed(lambda: df.write.mode("overwrite").json(str(tmp / f"json{n}")))

    t_json = json_write() if n % 2 == 0 else None
    with start_broker(f"file://{tmp / f'store{n}'}", **_broker_kwargs(tune_gc)) as broker:
        t_osq = timed(lambda: df.write.format("osqueue").option("broker", broker.url)
                      .option("queue", "bench-write")
                      .option("batchSize", str(batch_size)).mode("append").save())
        enq = QueueClient(broker.url, "bench-write").stats()
    if t_json is None:
        t_json = json_write()
    rows = df.count()
    assert enq["counts"]["pending"] == rows, enq["counts"]
    return {"json_s": t_json, "osqueue_s": t_osq, "json_rows_per_s": rows / t_json,
            "osqueue_rows_per_s": rows / t_osq, "ratio": t_json / t_osq,
            "first": "json" if n % 2 == 0 else "osqueue", "load": load()[0]}


def process_round(spark: Any, jobs_df: Any, tmp: Path, n: int, jobs: int, workers: int,
                  claim_batch: int, tune_gc: bool = False,
                  push_batch: int = 5000, bare_first: bool = True) -> dict[str, Any]:
    """One bare ``mapInPandas`` no-op and one ``process()`` over as many no-op jobs (the
    bare one first unless ``bare_first`` is False; the queue is filled untimed)."""

    def bare(batches: Any) -> Any:
        import pandas as pd

        for pdf in batches:
            yield pd.DataFrame({"id": pdf["id"].astype(str), "status": "completed"})

    def bare_run() -> float:
        return timed(lambda: jobs_df.mapInPandas(bare, "id string, status string")
                     .write.format("noop").mode("overwrite").save())

    t_bare = bare_run() if bare_first else None
    with start_broker(f"file://{tmp / f'pstore{n}'}", **_broker_kwargs(tune_gc)) as broker:
        client = QueueClient(broker.url, "bench-process")
        client.push_many(({"payload": {"n": i}} for i in range(jobs)), batch_size=push_batch)
        # idle_s=0: burst mode, each worker stops at its first empty claim, as the
        # bare mapInPandas stops at the end of its input
        fn = process(noop, broker=broker.url, queue="bench-process",
                     batch_size=claim_batch, idle_s=0.0, lease_s=120)
        pool = spark.range(workers, numPartitions=workers)
        t_proc = timed(lambda: pool.mapInPandas(fn, RESULT_SCHEMA)
                       .write.format("noop").mode("overwrite").save())
        done = client.stats()["completed_total"]
    assert done == jobs, done
    if t_bare is None:
        t_bare = bare_run()
    return {"bare_s": t_bare, "process_s": t_proc, "bare_rows_per_s": jobs / t_bare,
            "process_jobs_per_s": jobs / t_proc, "ratio": t_bare / t_proc,
            "first": "bare" if bare_first else "process", "load": load()[0]}


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = sorted(r["ratio"] for r in rounds)
    mid = next(r for r in rounds if r["ratio"] == ratios[len(ratios) // 2])
    return {**mid, "ratios": [r["ratio"] for r in rounds], "rounds": rounds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median counts")
    p.add_argument("--batch-size", type=int, default=5000, help="rows per staged chunk")
    p.add_argument("--claim-batch", default="2000,10000",
                   help="jobs per claim in process(); several, comma-separated, are run in turn")
    p.add_argument("--push-batch", type=int, default=5000,
                   help="jobs per push when filling process()'s queue: from the broker's "
                        "segment_push_jobs (10,000) on they go into segment objects")
    p.add_argument("--only", choices=["write", "process"], help="run one of the two pairs")
    p.add_argument("--tune-gc", action="store_true",
                   help="start_broker(tune_gc=True): the driver's GC tuned as a broker "
                        "process's (an embedded broker leaves it alone by default)")
    p.add_argument("--out", help="results name under bench/results (default spark_bench[_only])")
    args = p.parse_args()
    claim_batches = [int(b) for b in str(args.claim_batch).split(",")]

    from pyspark.sql import functions as F

    spark = local_session("osqueue-bench", cores=args.workers)
    tmp = Path(tempfile.mkdtemp(prefix="osq-spark-bench-"))
    df = (spark.range(args.rows, numPartitions=args.partitions)
          .select(F.to_json(F.struct(F.col("id").alias("doc"),
                                     F.concat(F.lit("s3://bucket/docs/"), F.col("id"),
                                              F.lit(".json")).alias("path"))).alias("payload"))
          .cache())
    df.count()  # materialise once so both writes read the same cached rows
    jobs_df = spark.range(args.jobs, numPartitions=args.workers).cache()
    jobs_df.count()
    results: dict[str, Any] = {"rows": args.rows, "jobs": args.jobs, "workers": args.workers,
                               "rounds": args.rounds, "tune_gc": args.tune_gc,
                               "push_batch": args.push_batch}

    # Warm-up, not timed: the first Python task of a session starts Spark's
    # Python workers (about 5 s here), which neither side should be charged.
    if args.only != "process":
        write_round(spark, df.limit(1000), tmp, -1, args.batch_size, args.tune_gc)
    process_round(spark, jobs_df.limit(1000), tmp, -1, 1000, args.workers, claim_batches[0],
                  args.tune_gc)

    writes: list[dict[str, Any]] = []
    procs: dict[int, list[dict[str, Any]]] = {b: [] for b in claim_batches}
    for n in range(args.rounds):
        if args.only != "process":
            w = write_round(spark, df, tmp, n, args.batch_size, args.tune_gc)
            writes.append(w)
            print(f"round {n + 1}: write {args.rows:,} rows: df.write.json "
                  f"{w['json_rows_per_s']:>9,.0f} rows/s   osqueue "
                  f"{w['osqueue_rows_per_s']:>9,.0f} rows/s   ratio {w['ratio']:.3f}", flush=True)
        if args.only == "write":
            continue
        for batch in claim_batches:
            r = process_round(spark, jobs_df, tmp, n * 100 + batch, args.jobs, args.workers,
                              batch, args.tune_gc, args.push_batch, bare_first=n % 2 == 0)
            procs[batch].append(r)
            print(f"round {n + 1}: process {args.jobs:,} no-op jobs, claim batches of "
                  f"{batch:,}: bare mapInPandas {r['bare_rows_per_s']:>9,.0f} rows/s   "
                  f"process() {r['process_jobs_per_s']:>9,.0f} jobs/s   ratio {r['ratio']:.3f}",
                  flush=True)
    if writes:
        w = results["write"] = median_round(writes)
        print(f"median write ratio {w['ratio']:.3f} (osqueue {w['osqueue_rows_per_s']:,.0f} "
              f"rows/s, json {w['json_rows_per_s']:,.0f} rows/s)")
    if args.only != "write":
        results["process"] = {}
        for batch, rounds in procs.items():
            r = results["process"][str(batch)] = median_round(rounds)
            print(f"median process ratio {r['ratio']:.3f} with claim batches of {batch:,} "
                  f"(process() {r['process_jobs_per_s']:,.0f} jobs/s, bare "
                  f"{r['bare_rows_per_s']:,.0f} rows/s)")
    name = "spark_bench" + (f"_{args.only}" if args.only else "")
    name += "_tuned_gc" if args.tune_gc else ""
    path = write_results(args.out or name, results)
    print(f"results written to {path}")
    spark.stop()


if __name__ == "__main__":
    main()
