"""Worker pool: the queue -> mapInPandas workers -> a results table on disk.

    python jobs/worker_pool.py --workers 4 --out /tmp/results [--broker URL | --store ...]
"""

from __future__ import annotations

import sys
import time

from osqueue_spark.pipelines.common import broker_for, job_args, process_queue
from osqueue_spark.session import local_session


def main(argv: list[str] | None = None) -> int:
    p = job_args(__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--out", default="/tmp/osqueue-results")
    p.add_argument("--idle-s", type=float, default=5.0, help="stop after this long idle")
    p.add_argument("--wait-for-queue", action="store_true",
                   help="a queue not created yet counts as empty (workers started before "
                        "their producers); without it, a missing queue fails the job")
    args = p.parse_args(argv)
    spark = local_session("osqueue-workers", remote=args.remote)
    with broker_for(args) as url:
        started = time.perf_counter()
        results = process_queue(spark, url, args.queue, args.workers, token=args.token,
                                idle_s=args.idle_s, wait_for_queue=args.wait_for_queue)
        results.write.mode("append").parquet(args.out)
        elapsed = time.perf_counter() - started
    summary = spark.read.parquet(args.out).groupBy("status").count().collect()
    print(f"worker pool finished in {elapsed:.1f}s; results in {args.out}: "
          + ", ".join(f"{r['status']}={r['count']:,}" for r in summary))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
