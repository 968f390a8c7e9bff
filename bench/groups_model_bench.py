"""Where a grouped job's extra CPU goes: the model alone, phase by phase, in process.

    .venv/bin/python bench/groups_model_bench.py [--rounds 3] [--baseline DIR]

``bench/groups_cpu_bench.py`` runs the whole broker (its commit loop, the store's
threads); this runs the same cycles through the model only: 16 clients, each 40
times push 100 JSON jobs (spread over the row's groups as the load generator
spreads them), claim 100, complete them, applied with ``transitions.apply`` in
batches as a commit takes them (the pushes, the claims, the completions; each
batch stamped and encoded, the completions dropped after the next commit), no
I/O. Each run is a child process importing one tree's broker; a phase's figure
is the thread CPU microseconds a job spent in it (the functions below wrapped
with a timer, each called once per operation or commit: the timer's cost is
per call, not per job), the least of ``--rounds`` runs. Rows: ungrouped,
1,000 groups, 1,000 groups with ``group_limit`` 2. ``--baseline DIR``: that
tree's runs too, in the same interleaved rounds. ``--instructions``: instead,
each row once per tree under valgrind's callgrind, the instructions a job
(those of a run of ``--instruction-rounds`` cycles less those of a run of none,
over its jobs): a count no other work on the machine moves, to weigh a change
too small for a shared machine's CPU times. Writes
bench/results/groups_model.json (or ``--out NAME``: NAME.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: row -> (groups, group_limit): 0 groups is the ungrouped twin.
ROWS = {"ungrouped": (0, None), "groups1000": (1000, None), "groups1000-limit2": (1000, 2)}
CLIENTS, ROUNDS_EACH, BATCH = 16, 40, 100
T0 = 1_767_225_600_000

#: (module, function) -> its phase: what the commit loop calls once an operation.
PHASES = [("broker.model.transitions", "insert_jobs", "push: insert_jobs"),
          ("broker.model.transitions", "take_pushed", "push: take_pushed"),
          ("broker.model.transitions", "claim_merged", "claim: all"),
          ("broker.model.segments.claims", "claim_ready", "claim: claim_ready (ungrouped)"),
          ("broker.model.segments.grouped", "claim_ready", "claim: claim_ready (grouped)"),
          ("broker.model.segments.grouped", "_absorb", "claim: _absorb (heads told)"),
          ("broker.model.segments.grouped", "fair_turns", "claim: fair_turns"),
          ("broker.model.transitions", "complete_held", "complete: complete_held"),
          ("broker.model.format.codec", "stamp", "commit: stamp"),
          ("broker.model.format.codec", "encode_parts", "commit: encode_parts")]


def _child(row: str, rounds_each: int = ROUNDS_EACH) -> dict[str, float]:
    """One run of ``row`` (imports whichever broker is first on the path): thread CPU
    microseconds a job, by phase and in all."""
    import importlib
    import secrets
    from collections import Counter

    import orjson

    from broker.model import tokens, transitions
    from broker.model.format import codec
    from broker.model.ops import Claim, Complete, CompleteItem, DropArchived, NewJob, Push

    spent: Counter[str] = Counter()
    clock = time.thread_time

    def timed(fn: Any, phase: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[phase] += clock() - t0
        return run

    for module, name, phase in PHASES:
        mod = importlib.import_module(module)
        if hasattr(mod, name):
            setattr(mod, name, timed(getattr(mod, name), phase))
    groups, limit = ROWS[row]
    state = transitions.new_state(T0)
    tokens.bind(state, "bench", secrets.token_bytes)
    if limit is not None:
        state.settings.groups = {"group_limit": limit}
    bodies = [tuple(NewJob(orjson.dumps({"n": i, "doc": f"doc-{i}"}),
                           group=f"g{(n * BATCH + i) % groups:05d}" if groups else None)
                    for i in range(BATCH)) for n in range(CLIENTS)]
    now = T0

    def commit() -> None:
        nonlocal now
        codec.stamp(state, "bench", now, secrets.token_hex(8))
        b"".join(codec.encode_parts(state))
        now += 1

    t0 = clock()
    archived: list[int] = []
    for r in range(rounds_each):
        for n in range(CLIENTS):
            transitions.apply(state, Push(bodies[n], request=f"p-{n}-{r}"), now)
        commit()
        claimed = [transitions.apply(state, Claim(f"w{n}", BATCH, 60_000,
                                                  request=f"c-{n}-{r}"), now).jobs
                   for n in range(CLIENTS)]
        commit()
        for jobs in claimed:
            transitions.apply(state, Complete(tuple(
                CompleteItem(token, b"1") for token in jobs.columns[2])), now)
        done = state.seq + 1
        commit()
        if archived:
            transitions.apply(state, DropArchived(tuple(archived)), now)
        archived = [done]
    jobs_n = max(1, CLIENTS * rounds_each * BATCH)
    out = {phase: s * 1e6 / jobs_n for phase, s in spent.items()}
    out["all"] = (clock() - t0) * 1e6 / jobs_n
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="groups_model",
                   help="the results file's name under bench/results/ (default %(default)s)")
    p.add_argument("--child", choices=list(ROWS), help=argparse.SUPPRESS)
    p.add_argument("--child-rounds", type=int, default=ROUNDS_EACH, help=argparse.SUPPRESS)
    p.add_argument("--instructions", action="store_true",
                   help="count instructions a job under valgrind (callgrind), no timing")
    p.add_argument("--instruction-rounds", type=int, default=10,
                   help="with --instructions: cycles of each client a run (default %(default)s)")
    p.add_argument("--baseline", type=Path,
                   help="another checkout whose model runs every row too, in the same "
                        "interleaved rounds")
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.child_rounds)))
        return
    sys.path.insert(0, str(ROOT))
    from bench._common import child_output, write_results
    trees = {"after": ROOT} if args.baseline is None else {"before": args.baseline, "after": ROOT}
    if args.instructions:
        _instructions(trees, args.instruction_rounds, args.out)
        return
    runs: dict[str, dict[str, list[dict[str, float]]]] = {t: {r: [] for r in ROWS} for t in trees}
    for n in range(args.rounds):
        order = [(tree, row) for row in ROWS for tree in trees]
        for tree, row in order if n % 2 == 0 else order[::-1]:
            got = json.loads(child_output(__file__, trees[tree], "--child", row).splitlines()[-1])
            runs[tree][row].append(got)
            print(f"round {n + 1} {tree:<6} {row:<18} {got['all']:6.2f} us a job", flush=True)
    summary: dict[str, dict[str, dict[str, float]]] = {}
    print("== least of the rounds, thread CPU us a job (grouped rows: over the ungrouped)")
    for tree in trees:
        summary[tree] = {row: {phase: min(r.get(phase, 0.0) for r in rs)
                               for phase in {k for r in rs for k in r}}
                         for row, rs in runs[tree].items()}
        base = summary[tree]["ungrouped"]["all"]
        for row, phases in summary[tree].items():
            print(f"{tree:<6} {row:<18} all {phases['all']:6.2f}"
                  + ("" if row == "ungrouped" else f" (ungrouped/this {base / phases['all']:.3f})"))
            for phase, us in sorted(phases.items(), key=lambda kv: -kv[1]):
                if phase != "all" and us >= 0.05:
                    print(f"         {phase:<36} {us:6.2f}")
    payload: dict[str, Any] = {"rounds": args.rounds, "results": summary["after"]}
    if args.baseline is not None:
        payload.update(baseline=str(args.baseline), before=summary["before"])
    path = write_results(args.out, payload)
    print(f"results written to {path}")


def _instructions(trees: dict[str, Path], rounds_each: int, out: str) -> None:
    """Instructions a job of each row and tree, counted by callgrind (see the module
    docstring); the rows' ratios are ungrouped over grouped instructions a job."""
    import os
    import re
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from bench._common import write_results

    def count(root: Path, row: str, rounds: int) -> int:
        env = {**os.environ, "PYTHONPATH": str(root)}
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
             __file__, "--child", row, "--child-rounds", str(rounds)],
            env=env, cwd=root, capture_output=True, text=True, check=True, timeout=3600)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if found is None:
            raise RuntimeError(f"callgrind counted nothing: {done.stderr[-500:]}")
        return int(found.group(1))

    jobs_n = CLIENTS * rounds_each * BATCH
    runs = [(tree, row, n) for tree in trees for row, n in [("ungrouped", 0)]
            + [(row, rounds_each) for row in ROWS]]
    with ThreadPoolExecutor(2) as pool:  # (counts, not times: two at once change nothing)
        counted = dict(zip(runs, pool.map(lambda run: count(trees[run[0]], *run[1:]), runs),
                           strict=True))
    summary: dict[str, dict[str, Any]] = {}
    for tree in trees:
        empty = counted[(tree, "ungrouped", 0)]
        rows = {row: (counted[(tree, row, rounds_each)] - empty) / jobs_n for row in ROWS}
        summary[tree] = {"instructions_at_start": empty, "instructions_a_job": rows,
                         "ungrouped_over_grouped": {row: rows["ungrouped"] / n
                                                    for row, n in rows.items()
                                                    if row != "ungrouped"}}
        print(f"{tree:<6} " + "  ".join(f"{row} {n:,.0f}" for row, n in rows.items())
              + " instructions a job", flush=True)
    payload: dict[str, Any] = {"instruction_rounds": rounds_each, "jobs": jobs_n,
                               "results": summary["after"]}
    if "before" in summary:
        payload["before"] = summary["before"]
        payload["after_over_before"] = {
            row: summary["after"]["instructions_a_job"][row]
            / summary["before"]["instructions_a_job"][row] for row in ROWS}
    path = write_results(out, payload)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
