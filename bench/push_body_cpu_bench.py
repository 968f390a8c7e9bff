"""A push body's CPU in the broker before its commit: the HTTP route's parse of the
jobs (``broker.http.parsers.parse_new_jobs``) and the receipt's digest of them
(``broker.model.receipts.push_digest``), plain jobs against grouped ones.

    .venv/bin/python bench/push_body_cpu_bench.py [--rounds 5] [--baseline DIR] [--out NAME]

The bodies are those ``bench/loadgen.py`` sends in ``bench/broker_bench.py``'s
cycle rows: 100 jobs ``{"payload": {"n": i, "doc": "doc-i"}}`` (``plain-b100``),
the same with ``"group": "g00042"`` spread over 1,000 groups as the load generator
spreads them (``grouped-b100``), and one plain job (``plain-b1``). Each run is a
child process (the tree under test first on ``PYTHONPATH``) timing the best of 7
repeats in CPU seconds (``time.process_time``: another engineer's load moves it
little); a row's figure is the median over ``--rounds`` interleaved rounds, in
microseconds a job. ``--baseline DIR``: another checkout runs every row too, in
the same rounds (its figures go in the results as ``before``). Writes
bench/results/push_body_cpu.json (or ``--out NAME``: NAME.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: row -> (jobs a body, groups: 0 for plain jobs, bodies parsed a repeat)
ROWS = {"plain-b100": (100, 0, 160), "grouped-b100": (100, 1000, 160), "plain-b1": (1, 0, 8000)}
CLIENTS = 16


def _run() -> dict[str, float]:
    """Microseconds of CPU a job for each row (imports whichever broker is first on the path)."""
    import orjson

    from broker.http.parsers import parse_new_jobs
    from broker.model.receipts import push_digest

    out = {}
    for row, (batch, groups, n) in ROWS.items():
        bodies = [orjson.loads(orjson.dumps({"jobs": [
            {"payload": {"n": i, "doc": f"doc-{i}"}} | (
                {"group": f"g{(c * batch + i) % groups:05d}"} if groups else {})
            for i in range(batch)]})) for c in range(CLIENTS)]

        def work(bodies: list[object] = bodies, n: int = n) -> None:
            for k in range(n):
                push_digest(parse_new_jobs(bodies[k % CLIENTS]))  # type: ignore[arg-type]

        best = min(timeit.repeat(work, number=1, repeat=7, timer=time.process_time))
        out[row] = best / (n * batch) * 1e6
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="push_body_cpu",
                   help="the results file's name under bench/results/ (default %(default)s)")
    p.add_argument("--baseline", type=Path, help="another checkout, run in the same rounds")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_run()))
        return
    sys.path.insert(0, str(ROOT))
    from bench._common import child_output, write_results
    trees = {"after": ROOT} if args.baseline is None else {"before": args.baseline, "after": ROOT}
    runs: dict[str, dict[str, list[float]]] = {t: {row: [] for row in ROWS} for t in trees}
    for n in range(args.rounds):
        order = list(trees)
        for tree in order if n % 2 == 0 else order[::-1]:
            got = json.loads(child_output(__file__, trees[tree], "--child").split("\n")[-2])
            for row in ROWS:
                runs[tree][row].append(got[row])
            print(f"round {n + 1} {tree:<6} " + "  ".join(
                f"{row} {got[row]:.3f}" for row in ROWS) + " us/job (CPU)", flush=True)
    summaries = {tree: {row: {"cpu_us_per_job": statistics.median(runs[tree][row]),
                              "rounds": runs[tree][row]} for row in ROWS} for tree in trees}
    print("== summary (median of the rounds, CPU microseconds a job: parse and digest)")
    for tree, summary in summaries.items():
        print(f"{tree:<6} " + "  ".join(f"{row} {summary[row]['cpu_us_per_job']:.3f}"
                                        for row in ROWS))
    payload: dict[str, object] = {"rounds": args.rounds, "results": summaries["after"]}
    if args.baseline is not None:
        payload.update(baseline=str(args.baseline), before=summaries["before"])
    print(f"results written to {write_results(args.out, payload)}")


if __name__ == "__main__":
    main()
