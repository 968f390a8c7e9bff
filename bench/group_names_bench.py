"""A long-lived broker's memory after many distinct groups: the model alone, in process.

    .venv/bin/python bench/group_names_bench.py [--groups 200000] [--baseline DIR]

Each run is a child process importing one tree's broker that pushes ``--groups``
jobs, each in a group of its own (a queue grouped by customer, API key or run
id), ``--batch`` at a time: push, claim them all, complete them, the commit
stamped and encoded and the completed jobs of the commit before dropped (their
archive written), as a broker's commit loop would, no I/O. The queue's state (and its
group structures) stays in memory throughout, as on a broker that owns it for
days. Figures: the Python heap traced by ``tracemalloc`` (bytes, after a
``gc.collect()``), the names interned and their ``spelt`` cache, at each tenth
of the run; and the child's peak RSS (MB). Rows: fair (no group setting) and
``group_limit`` 2. ``--baseline DIR``: that tree's runs too, side by side.
Writes bench/results/group_names.json (or ``--out NAME``: NAME.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: row -> its group settings.
ROWS: dict[str, dict[str, Any]] = {"fair": {}, "limit2": {"group_limit": 2}}
T0 = 1_767_225_600_000


def _child(row: str, groups: int, batch: int) -> dict[str, Any]:
    """One run of ``row`` (imports whichever broker is first on the path)."""
    import gc
    import resource
    import secrets
    import tracemalloc

    from broker.model import tokens, transitions
    from broker.model.format import codec
    from broker.model.ops import Claim, Complete, CompleteItem, DropArchived, NewJob, Push

    tracemalloc.start()
    state = transitions.new_state(T0)
    tokens.bind(state, "bench", secrets.token_bytes)
    state.settings.groups = dict(ROWS[row])
    now, archived = T0, [0]
    points = []
    rounds = max(1, groups // batch)
    for r in range(rounds):
        transitions.apply(state, Push(tuple(NewJob(b"1", group=f"tenant-{r * batch + i:08d}")
                                            for i in range(batch))), now)
        jobs = transitions.apply(state, Claim("w", batch, 60_000), now).jobs
        assert len(jobs) == batch
        transitions.apply(state, Complete(tuple(CompleteItem(t, b"1")
                                                for t in jobs.columns[2])), now)
        done = state.seq + 1
        codec.stamp(state, "bench", now, secrets.token_hex(8))
        b"".join(codec.encode_parts(state))  # (as a commit: it also prunes what left the head)
        transitions.apply(state, DropArchived((archived[0],)), now)
        archived[0] = done
        now += 1
        if (r + 1) % max(1, rounds // 10) == 0 or r + 1 == rounds:
            gc.collect()
            g = state.groups
            points.append({"groups_seen": (r + 1) * batch,
                           "traced_bytes": tracemalloc.get_traced_memory()[0],
                           "names": 0 if g is None else len(g.names),
                           "spelt": 0 if g is None else len(g.names.spelt)})
    return {"points": points, "final": points[-1],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    p.add_argument("--baseline", type=Path, help="another tree (e.g. /work/main), run beside")
    p.add_argument("--out", default="group_names",
                   help="the results file's name under bench/results/ (default %(default)s)")
    p.add_argument("--child", choices=list(ROWS), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(json.dumps(_child(args.child, args.groups, args.batch)))
        return
    import os
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from bench._common import write_results

    trees = {"after": ROOT} if args.baseline is None else {"before": args.baseline, "after": ROOT}

    def run(tree: str, row: str) -> dict[str, Any]:
        root = trees[tree]
        done = subprocess.run(
            [sys.executable, __file__, "--child", row, "--groups", str(args.groups),
             "--batch", str(args.batch)], env={**os.environ, "PYTHONPATH": str(root)},
            cwd=root, capture_output=True, text=True, check=True, timeout=3600)
        return json.loads(done.stdout)

    runs = [(tree, row) for row in args.rows for tree in trees]
    with ThreadPoolExecutor(2) as pool:  # (memory, not time: two at once change nothing)
        results = dict(zip(runs, pool.map(lambda tr: run(*tr), runs), strict=True))
    summary: dict[str, Any] = {tree: {row: results[(tree, row)] for row in args.rows}
                               for tree in trees}
    if args.baseline is not None:
        summary["before_over_after_traced"] = {
            row: round(results[("before", row)]["final"]["traced_bytes"]
                       / results[("after", row)]["final"]["traced_bytes"], 2)
            for row in args.rows}
    for tree in trees:
        for row in args.rows:
            final = results[(tree, row)]["final"]
            print(f"{tree:6} {row:7} groups seen {final['groups_seen']:>8}: traced "
                  f"{final['traced_bytes'] / 1e6:8.2f} MB, names {final['names']:>7}, "
                  f"spelt {final['spelt']:>6}, peak RSS "
                  f"{results[(tree, row)]['peak_rss_mb']:7.1f} MB")
    payload = {"groups": args.groups, "batch": args.batch, "rows": args.rows, **summary}
    if args.baseline is not None:
        payload["baseline"] = str(args.baseline)
        print("before/after traced bytes:", summary["before_over_after_traced"])
    write_results(args.out, payload)


if __name__ == "__main__":
    main()
