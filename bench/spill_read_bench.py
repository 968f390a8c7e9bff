"""What reading a spill object back costs the broker: ``read_checked`` of one
whole object, every line parsed and checked, as a claim from a redriven dead
object or a pending one makes the commit that needs it wait (its
``prepare``: ``bench/bad_deploy_profile.py --window drain`` shows those reads
as the longest cycles of the drain after a redrive).

    .venv/bin/python bench/spill_read_bench.py [--jobs 16384] [--rounds 5]
        [--baseline DIR] [--out NAME]

The object is a bad deploy's: a dead object of ``--jobs`` jobs (a merged
object holds up to 16,384), each with two attempts and a history of two
failures with the same text, payloads as ``bad_deploy_bench`` writes them.
Each tree (this one, and ``--baseline DIR``'s, in child processes importing
that tree's broker) reads it ``--rounds`` times, interleaved, the order
turning each round; a figure is the least process CPU time of a read,
in ms and in us a job, and ``after_over_before`` the median of the rounds'
ratios. Writes bench/results/spill_read.json (or ``--out NAME``: NAME.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_795_000_000_000  # ms: the jobs' times (a fixed instant, 2026-11)
ERROR = "bad deploy: the worker function raises on every row"


def _child(jobs: int, reads: int) -> dict[str, float]:
    """In the tree on ``sys.path``: encode the object, then CPU seconds of each of
    ``reads`` whole reads (after one unmeasured read)."""
    from broker import paths
    from broker.model.format.spill_format import ErrorEntry, SpilledJob, encode_spills, read_checked
    from broker.model.format.spill_refs import new_ref
    from broker.model.job import DEAD

    payload = b'{"doc":%d,"path":"s3://bucket/docs/%d.json"}'
    spilled = [SpilledJob(seq=i + 1, payload=payload % (i, i), priority=0, run_at_ms=T0 + i,
                          attempts=2, max_attempts=2,
                          created_ms=T0 + i // 2000,
                          errors=(ErrorEntry(1, T0 + 100 + i // 2000, ERROR),
                                  ErrorEntry(2, T0 + 200 + i // 2000, ERROR)))
               for i in range(jobs)]
    [obj] = encode_spills("q", DEAD, spilled, max_jobs=jobs, max_bytes=1 << 40)
    ref = new_ref(obj, paths.spill_key("q", paths.spill_name(DEAD, 1, "5d0e91aa")), "etag")
    read_checked(ref, obj.data, "etag", "file:///bench", 0, ref.count)
    times = []
    for _ in range(reads):
        start = time.process_time()
        got = read_checked(ref, obj.data, "etag", "file:///bench", 0, ref.count)
        times.append(time.process_time() - start)
        assert len(got) == jobs
    return {"best_s": min(times), "bytes": len(obj.data)}


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--jobs", type=int, default=16_384, help="jobs in the object")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    p.add_argument("--baseline", type=Path, help="another checkout, read in the same rounds")
    p.add_argument("--out", default="spill_read", help="results name under bench/results")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--reads", type=int, default=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args.jobs, args.reads)))
        return
    if args.jobs < 1 or args.rounds < 1:
        p.error("--jobs and --rounds must be at least 1")
    sys.path.insert(0, str(ROOT))
    from bench._common import child_output, median_ratio, write_results

    trees = {"after": ROOT} if args.baseline is None else {"before": args.baseline, "after": ROOT}
    runs: dict[str, list[float]] = {tree: [] for tree in trees}
    size = 0
    for n in range(args.rounds):
        for tree in list(trees) if n % 2 == 0 else list(trees)[::-1]:
            got = json.loads(child_output(__file__, trees[tree], "--child", "--jobs",
                                          str(args.jobs)).splitlines()[-1])
            runs[tree].append(got["best_s"])
            size = got["bytes"]
            print(f"round {n + 1} {tree:<6} {got['best_s'] * 1e3:8.1f} ms", flush=True)
    payload: dict[str, Any] = {"jobs": args.jobs, "object_bytes": size, "rounds": args.rounds}
    for tree, times in runs.items():
        payload[tree] = {"read_ms": min(times) * 1e3, "us_a_job": min(times) / args.jobs * 1e6}
        print(f"{tree:<6} a read of {args.jobs:,} jobs ({size / 1e6:.2f} MB): "
              f"{payload[tree]['read_ms']:.1f} ms, {payload[tree]['us_a_job']:.2f} us a job")
    if args.baseline is not None:
        payload["baseline"] = str(args.baseline)
        payload["after_over_before"] = median_ratio(runs["after"], runs["before"])
        print(f"after / before (median of the rounds): {payload['after_over_before']:.3f}")
    print(f"results written to {write_results(args.out, payload)}")


if __name__ == "__main__":
    main()
