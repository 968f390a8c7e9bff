"""``make demo``: the queue end to end on the embedded default (local files, in-process broker).

    python -m osqueue_spark.pipelines.demo [--dir DIR] [--core-only]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from osqueue_spark import QueueClient, start_broker


def core_story(store_dir: Path) -> None:
    print(f"== core: broker on file://{store_dir}")
    with start_broker(f"file://{store_dir}", backoff_base_s=0.1) as broker:
        client = QueueClient(broker.url, "demo-core")
        ids = client.push_many([{"payload": {"n": n}, "priority": n % 3} for n in range(5)])
        print(f"pushed {len(ids)} jobs: {ids}")
        jobs = client.claim("demo-worker", max_jobs=5)
        print("claimed in priority order:", [(j.id, j.payload) for j in jobs])
        for job in jobs[:-1]:
            client.complete(job.token, {"square": job.payload["n"] ** 2})
        client.fail(jobs[-1].token, "demo failure: retried with backoff")
        print("stats:", json.dumps(client.stats()["counts"]))
    text = (store_dir / "demo-core" / "queue.json").read_text()
    print(f"== the queue object ({store_dir}/demo-core/queue.json), as jq would show it:")
    print(json.dumps(json.loads(text), indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="store directory (default: temp)")
    parser.add_argument("--core-only", action="store_true", help="skip the Spark part")
    args = parser.parse_args(argv)
    store_dir = (args.dir or Path(tempfile.mkdtemp(prefix="osqueue-demo-"))).resolve()
    store_dir.mkdir(parents=True, exist_ok=True)
    core_story(store_dir)
    if not args.core_only:
        try:
            from osqueue_spark.pipelines.spark_demo import spark_story
        except ImportError:
            print("(the Spark part of the demo is not available in this build)")
        else:
            spark_story(store_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
