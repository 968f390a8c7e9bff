"""Streaming consumer: readStream from the queue -> parquet, jobs completed per micro-batch.

    python jobs/streaming_consumer.py --broker URL --out /tmp/stream-out --checkpoint /tmp/ckpt \
        [--seconds 30 | --available-now] [--max-jobs-per-trigger 1000]

--available-now drains what the queue holds when the query starts, in micro-batches of at
most --max-jobs-per-trigger jobs, then stops: the only trigger Databricks serverless allows.
"""

from __future__ import annotations

import sys

from osqueue_spark.pipelines import broker_for, job_args, local_session


def main(argv: list[str] | None = None) -> int:
    p = job_args(__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/osqueue-stream-out")
    p.add_argument("--checkpoint", default="/tmp/osqueue-stream-ckpt")
    p.add_argument("--seconds", type=float, default=30.0, help="run this long (0: forever)")
    p.add_argument("--max-jobs-per-trigger", type=int, default=1000)
    p.add_argument("--available-now", action="store_true",
                   help="trigger(availableNow=True): drain the queue, then stop (serverless)")
    args = p.parse_args(argv)
    spark = local_session("osqueue-stream")
    with broker_for(args) as url:
        reader = (spark.readStream.format("osqueue").option("broker", url)
                  .option("queue", args.queue)
                  .option("maxJobsPerTrigger", str(args.max_jobs_per_trigger)))
        if args.token:
            reader = reader.option("token", args.token)
        writer = (reader.load().writeStream.format("parquet").option("path", args.out)
                  .option("checkpointLocation", args.checkpoint))
        if args.available_now:
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination()
        else:
            query = writer.trigger(processingTime="1 second").start()
            query.awaitTermination(args.seconds or None)
            query.stop()
    rows = spark.read.parquet(args.out).count()
    print(f"streamed {rows:,} jobs into {args.out}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
