"""Producer: a DataFrame of documents -> the queue, exactly once.

    python jobs/producer.py --rows 100000 [--broker URL | --store file:///tmp/q] [--queue docs]
    spark-submit jobs/producer.py --broker http://broker:8765 --rows 1000000
"""

from __future__ import annotations

import sys
import time

from osqueue_spark import QueueClient
from osqueue_spark.pipelines.common import broker_for, documents, enqueue, job_args
from osqueue_spark.session import local_session


def main(argv: list[str] | None = None) -> int:
    p = job_args(__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--partitions", type=int, default=8)
    args = p.parse_args(argv)
    spark = local_session("osqueue-producer", remote=args.remote)
    with broker_for(args) as url:
        started = time.perf_counter()
        enqueue(documents(spark, args.rows, args.partitions), url, args.queue, args.token)
        elapsed = time.perf_counter() - started
        stats = QueueClient(url, args.queue, token=args.token).stats()
        print(f"enqueued {args.rows:,} rows in {elapsed:.1f}s ({args.rows / elapsed:,.0f} rows/s); "
              f"queue {args.queue}: {stats['counts']}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
