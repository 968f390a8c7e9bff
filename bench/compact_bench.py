"""What the broker keeps a job when its bytes came from ``orjson.dumps``: traced
bytes and RSS a job, in process, main against a branch.

    .venv/bin/python bench/compact_bench.py [--jobs 100000] [--baseline DIR] [--out NAME]

``orjson.dumps`` returns a bytes object whose allocation is its write buffer
(~4 KB however short the JSON); :func:`broker.wire.compact` copies what the
broker retains. Rows, each through the HTTP layer's parsers
(:mod:`broker.http.parsers`) and the model (``transitions.apply``), in pushes
and completions of 1,000 jobs, each batch stamped and encoded as a commit
leaves it (no I/O):

- ``plain``: pending jobs with default options (kept as their lines: the
  reference row, nothing changed there);
- ``priority``, ``key``: pending jobs with a priority, with an idempotency key
  (kept as Job objects until claimed);
- ``completed``: jobs pushed plain and claimed, then completed with a result
  ``{"r": i}`` and kept awaiting their archive (only the completions counted).

Each row runs twice in a child process per tree (``--baseline DIR``: that
checkout's broker too): once under tracemalloc (bytes still traced after the
phase, a job), once without (VmRSS after the phase less before it, a job, and
the peak, VmHWM, less the RSS before it, a job: glibc's heap, so
noisier than the traced bytes; the peak is the process's, so a setup that
peaked higher than its phase shows in it too). Memory, not time: the figures do not move
with the machine's load. Writes bench/results/compact.json (or ``--out NAME``).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROWS = ("plain", "priority", "key", "completed")
BATCH = 1000
NOW = 1_767_225_600_000


def _phases(row: str, n: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(setup, phase) of ``row`` for ``n`` jobs: what ``phase`` leaves is measured."""
    from broker.http.parsers import parse_complete, parse_new_jobs
    from broker.model import tokens
    from broker.model import transitions as T
    from broker.model.format import codec
    from broker.model.ops import Claim, Complete, Push, push_of

    state = T.new_state(NOW)
    tokens.bind(state, "q", lambda k: bytes(range(k)))
    option: dict[str, Callable[[int], dict[str, Any]]] = {
        "plain": lambda i: {}, "completed": lambda i: {},
        "priority": lambda i: {"priority": 1}, "key": lambda i: {"key": f"k{i}"}}
    held: list[str] = []

    def commit() -> None:
        codec.stamp(state, "w", NOW)
        codec.encode_parts(state)

    def push() -> None:
        for first in range(0, n, BATCH):
            jobs = parse_new_jobs({"jobs": [{"payload": {"n": i}, **option[row](i)}
                                            for i in range(first, min(n, first + BATCH))]})
            T.apply(state, push_of(jobs) if row in ("plain", "completed")  # type: ignore[arg-type]
                    else Push(tuple(jobs)), NOW)
            commit()

    def claim() -> None:
        push()
        for _ in range(0, n, BATCH):
            held.extend(T.apply(state, Claim("w", BATCH, 600_000), NOW).jobs.tokens)
            commit()

    def complete() -> None:
        for first in range(0, n, BATCH):
            items = parse_complete({"items": [{"token": t, "result": {"r": i}} for i, t in
                                              enumerate(held[first:first + BATCH], first)]})
            T.apply(state, Complete(items), NOW)
            commit()
        held.clear()

    return (claim, complete) if row == "completed" else ((lambda: None), push)


def _child(row: str, n: int, traced: bool) -> dict[str, float]:
    from bench._measure import rss_bytes
    setup, phase = _phases(row, n)
    setup()
    gc.collect()
    if traced:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        phase()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return {"traced_b": (after - before) / n}
    before = rss_bytes()
    phase()
    gc.collect()
    return {"rss_b": (rss_bytes() - before) / n, "peak_rss_b": (_hwm_bytes() - before) / n}


def _hwm_bytes() -> int:
    """VmHWM (the peak VmRSS) from /proc/self/status, in bytes: ``ru_maxrss`` is
    updated lazily and can read below the current VmRSS."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=100_000, help="jobs a row (default %(default)s)")
    p.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    p.add_argument("--baseline", type=Path, help="another checkout (main), measured alike")
    p.add_argument("--out", default="compact",
                   help="the results file's name under bench/results/ (default %(default)s)")
    p.add_argument("--child", choices=ROWS, help=argparse.SUPPRESS)
    p.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.jobs, args.traced)))
        return
    sys.path.insert(0, str(ROOT))
    from bench._common import child_output, write_results
    trees = {"after": ROOT} if args.baseline is None else {"before": args.baseline, "after": ROOT}
    results: dict[str, dict[str, dict[str, float]]] = {t: {} for t in trees}
    for row in args.rows:
        for tree, root in trees.items():
            got: dict[str, float] = {}
            for flag in (["--traced"], []):
                out = child_output(__file__, root, "--child", row, "--jobs", str(args.jobs), *flag)
                got.update(json.loads(out.splitlines()[-1]))
            results[tree][row] = {k: round(v) for k, v in got.items()}
            print(f"{row:<10} {tree:<6} traced {got['traced_b']:7.0f} B a job, RSS "
                  f"{got['rss_b']:7.0f} B a job, peak RSS {got['peak_rss_b']:7.0f} B a job",
                  flush=True)
    payload: dict[str, Any] = {"jobs": args.jobs, "batch": BATCH, "results": results["after"]}
    if args.baseline is not None:
        payload.update(baseline=str(args.baseline), before=results["before"],
                       traced_before_over_after={
                           row: round(results["before"][row]["traced_b"]
                                      / results["after"][row]["traced_b"], 2)
                           for row in args.rows})
    path = write_results(args.out, payload)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
