"""Archive report: spark.read of the archive -> a summary by hour (no broker needed).

    python jobs/archive_report.py --store file:///tmp/osqueue-jobs --queue docs
"""

from __future__ import annotations

import sys

from osqueue_spark.pipelines.common import archive_report, job_args
from osqueue_spark.session import local_session


def main(argv: list[str] | None = None) -> int:
    args = job_args(__doc__.splitlines()[0]).parse_args(argv)
    spark = local_session("osqueue-archive-report", remote=args.remote)
    report = archive_report(spark, args.store, args.queue)
    report.show(50, truncate=False)
    total = sum(r["completed"] for r in report.collect())
    print(f"{total:,} completed jobs archived in queue {args.queue}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
