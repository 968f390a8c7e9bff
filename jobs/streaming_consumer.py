"""Streaming consumer: readStream from the queue -> parquet, jobs completed per micro-batch.

    python jobs/streaming_consumer.py --broker URL --out /tmp/stream-out --checkpoint /tmp/ckpt \
        [--seconds 30] [--max-jobs-per-trigger 1000] [--available-now]

``--available-now`` drains the jobs the queue holds at the start in batches of
``--max-jobs-per-trigger`` and stops by itself (the trigger serverless compute
allows; PySpark 4.2+: on 4.0 and 4.1 it runs one batch, see
:mod:`osqueue_spark.datasource.stream_reader`).
"""

from __future__ import annotations

import sys

from osqueue_spark.pipelines.common import broker_for, job_args
from osqueue_spark.session import local_session


def main(argv: list[str] | None = None) -> int:
    p = job_args(__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/osqueue-stream-out")
    p.add_argument("--checkpoint", default="/tmp/osqueue-stream-ckpt")
    p.add_argument("--seconds", type=float, default=30.0, help="run this long (0: forever)")
    p.add_argument("--max-jobs-per-trigger", type=int, default=1000)
    p.add_argument("--available-now", action="store_true",
                   help="drain what the queue holds now, then stop (ignores --seconds)")
    p.add_argument("--wait-for-queue", action="store_true",
                   help="a queue not created yet reads as empty until its first push; "
                        "without it, a missing queue fails the query")
    args = p.parse_args(argv)
    spark = local_session("osqueue-stream", remote=args.remote)
    with broker_for(args) as url:
        reader = (spark.readStream.format("osqueue").option("broker", url)
                  .option("queue", args.queue)
                  .option("maxJobsPerTrigger", str(args.max_jobs_per_trigger))
                  .option("waitForQueue", str(args.wait_for_queue).lower()))
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
