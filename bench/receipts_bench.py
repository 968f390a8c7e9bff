"""What the receipts cost a keyed call (broker/model/receipts.py, calls.py), this tree
against another checkout.

Every push and claim sent with a request key (``QueueClient`` keys them all)
passes the receipts four times in its commit: the client's floor is checked
(``below_floor``) and moved (``answered_below``), its earlier answer looked up
(``answered``), its own answer recorded (``record``); and each commit trims
them. This times that sequence for 64 clients' calls in turn, a trim every 32
calls (a group commit at 64 clients), in a child process per checkout
(``--baseline DIR``: its ``broker`` package), the two interleaved round by
round. Besides the time per call (the best round's, and the median of the
rounds' ratios), it counts the Python function calls per keyed call with
``cProfile``: a figure the machine's load does not move. In a tree whose
receipts keep a digest of a push's jobs (``push_digest``) it also times that
digest, once per keyed push: for one small job, for 1,000, and per MB of
payload (a request of 8 MiB).

    .venv/bin/python bench/receipts_bench.py [--baseline /work/base-session] [--rounds 7]

Prints a table and writes bench/results/receipts_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = 64
PER_COMMIT = 32


def keyed_calls(receipts: Any, calls: int, start: int) -> None:
    """``calls`` keyed calls' work on ``receipts``: 64 clients in turn, each call
    numbered one past the client's previous one and carrying its floor."""
    for i in range(start, start + calls):
        n = i // CLIENTS + 1
        key = f"r-{i % CLIENTS:012x}-{n}"
        receipts.below_floor(key)
        receipts.answered_below(key, n, i)
        receipts.answered(key, "push")
        receipts.record(key, "push", [i, 1], i)
        if i % PER_COMMIT == 0:
            receipts.trim(i, 300_000, 10_000)


def child(calls: int) -> dict[str, float]:
    """In the checkout on ``sys.path``: seconds per keyed call (best of 5 loops of
    ``calls``) and Python function calls per keyed call."""
    import cProfile
    import pstats

    from broker.model.receipts import Receipts

    receipts = Receipts()
    keyed_calls(receipts, calls, 0)  # warm: every client has a floor and a receipt
    best = float("inf")
    for loop in range(1, 6):
        start = time.perf_counter()
        keyed_calls(receipts, calls, loop * calls)
        best = min(best, time.perf_counter() - start)
    profile = cProfile.Profile()
    profile.enable()
    keyed_calls(receipts, calls, 6 * calls)
    profile.disable()
    return {"s_per_call": best / calls,
            "py_calls_per_call": pstats.Stats(profile).total_calls / calls,
            **digest_costs()}


def digest_costs() -> dict[str, float]:
    """Seconds ``push_digest`` takes (best of 5) of one 8-byte job, of 1,000 jobs
    of 80 bytes, and per MB of 8 MiB of payload; none in a tree without it."""
    try:
        from broker.model.receipts import push_digest
    except ImportError:
        return {}
    out = {}
    for name, jobs, per in (("digest_s_1_job", [b'{"n":42}'], 1),
                            ("digest_s_1000_jobs", [b'{"n":%070d}' % i for i in range(1000)], 1),
                            ("digest_s_per_mb", [b'"' + b"x" * 8190 + b'"'] * 1024, 8)):
        loops = max(1, 20_000 // len(jobs))
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(loops):
                push_digest(jobs)
            best = min(best, (time.perf_counter() - start) / loops)
        out[name] = best / per
    return out


def run_child(root: Path, calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                          "--calls", str(calls)], env=env, cwd=root, capture_output=True,
                         text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, help="another checkout to compare with")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.calls)))
        return
    sys.path.insert(0, str(ROOT))
    from bench._common import in_rounds, median_ratio, write_results

    trees = {"after": ROOT}
    if args.baseline is not None:
        trees = {"before": args.baseline.resolve(), **trees}
    out = in_rounds({name: (lambda root=root: run_child(root, args.calls))
                     for name, root in trees.items()}, args.rounds)
    rows = out["values"]
    summary: dict[str, Any] = {}
    for name, root in trees.items():
        times = [r["s_per_call"] for r in rows[name]]
        summary[name] = {"tree": str(root), "best_us_per_call": min(times) * 1e6,
                         "median_us_per_call": statistics.median(times) * 1e6,
                         "py_calls_per_call": rows[name][0]["py_calls_per_call"]}
        print(f"{name:<7} {root!s:<34} best {min(times) * 1e6:6.2f} us/keyed call  "
              f"median {statistics.median(times) * 1e6:6.2f}  "
              f"{rows[name][0]['py_calls_per_call']:.1f} Python calls/keyed call")
        digests = {k: min(r[k] for r in rows[name]) * 1e6 for k in rows[name][0]
                   if k.startswith("digest_")}
        if digests:
            summary[name]["digest_us"] = digests
            print(f"        push digest: {digests['digest_s_1_job']:.2f} us for 1 job, "
                  f"{digests['digest_s_1000_jobs']:.1f} us for 1,000, "
                  f"{digests['digest_s_per_mb']:.0f} us per MB")
    if "before" in trees:
        before = [r["s_per_call"] for r in rows["before"]]
        after = [r["s_per_call"] for r in rows["after"]]
        summary["speedup"] = median_ratio(before, after)  # above 1: this tree is faster
        print(f"speed-up (median of round ratios before/after): {summary['speedup']:.3f}")
    path = write_results("receipts_bench", {"calls": args.calls, "rounds": args.rounds,
                                            "load_per_round": out["load"],
                                            "results": summary})
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
