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
too small for a shared machine's CPU times. ``--instructions --phases``: also
each phase's instructions a job, steady state (one phase a run: only its calls
counted, callgrind's ``--toggle-collect`` on a C function the child calls it
through; a run of ``--instruction-rounds`` cycles less a run of one, over the
jobs between): where a grouped job's extra instructions go, deterministically.
``--rows``: only those rows. Writes bench/results/groups_model.json (or ``--out
NAME``: NAME.json).
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
#: --phases: the child counts this phase only (its name in PHASES), called through
#: operator.call, whose C function callgrind toggles collection on.
_PHASE_ENV = "OSQ_BENCH_PHASE"
_PHASE_TOGGLE = "_operator_call"

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
    import operator
    import os
    import secrets
    from collections import Counter
    from functools import partial

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

    counted = os.environ.get(_PHASE_ENV)
    for module, name, phase in PHASES:
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            continue
        if counted is None:
            setattr(mod, name, timed(getattr(mod, name), phase))
        elif counted == phase:  # (--phases: its calls go through _operator_call, counted)
            setattr(mod, name, partial(operator.call, getattr(mod, name)))
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
    p.add_argument("--phases", action="store_true",
                   help="with --instructions: also each phase's instructions a job")
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS),
                   help="the rows to run (default: all)")
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
        _instructions(trees, args.instruction_rounds, args.out, args.rows, args.phases)
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


def _instructions(trees: dict[str, Path], rounds_each: int, out: str,
                  rows_run: list[str] | None = None, phases: bool = False) -> None:
    """Instructions a job of each row and tree, counted by callgrind (see the module
    docstring); the rows' ratios are ungrouped over grouped instructions a job
    (with ``ungrouped`` among ``rows_run``). ``phases``: each phase's too."""
    import os
    import re
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from bench._common import write_results

    rows_run = rows_run or list(ROWS)

    def count(root: Path, row: str, rounds: int, phase: str | None = None) -> int:
        env = {**os.environ, "PYTHONPATH": str(root)}
        toggle: list[str] = []
        if phase is not None:
            env[_PHASE_ENV] = phase
            toggle = [f"--toggle-collect={_PHASE_TOGGLE}"]
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *toggle,
             sys.executable, __file__, "--child", row, "--child-rounds", str(rounds)],
            env=env, cwd=root, capture_output=True, text=True, check=True, timeout=3600)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if found is None:
            raise RuntimeError(f"callgrind counted nothing: {done.stderr[-500:]}")
        return int(found.group(1))

    jobs_n = CLIENTS * rounds_each * BATCH
    runs: list[tuple[str, str, int, str | None]] = [
        (tree, row, n, None) for tree in trees
        for row, n in [("ungrouped", 0)] + [(row, rounds_each) for row in rows_run]]
    if phases:  # (steady state: rounds_each cycles less one, the first's building left out)
        runs += [(tree, row, n, phase) for tree in trees for row in rows_run
                 for _, _, phase in PHASES for n in (1, rounds_each)]
    with ThreadPoolExecutor(2) as pool:  # (counts, not times: two at once change nothing)
        counted = dict(zip(runs, pool.map(lambda run: count(trees[run[0]], *run[1:]), runs),
                           strict=True))
    summary: dict[str, dict[str, Any]] = {}
    for tree in trees:
        empty = counted[(tree, "ungrouped", 0, None)]
        rows = {row: (counted[(tree, row, rounds_each, None)] - empty) / jobs_n
                for row in rows_run}
        summary[tree] = {"instructions_at_start": empty, "instructions_a_job": rows}
        if "ungrouped" in rows:
            summary[tree]["ungrouped_over_grouped"] = {
                row: rows["ungrouped"] / n for row, n in rows.items() if row != "ungrouped"}
        print(f"{tree:<6} " + "  ".join(f"{row} {n:,.0f}" for row, n in rows.items())
              + " instructions a job", flush=True)
        if phases:
            steady = CLIENTS * (rounds_each - 1) * BATCH
            split = summary[tree]["phases_a_job"] = {
                row: {phase: (counted[(tree, row, rounds_each, phase)]
                              - counted[(tree, row, 1, phase)]) / steady
                      for _, _, phase in PHASES} for row in rows_run}
            for row, by_phase in split.items():
                print(f"       {row}: " + ", ".join(f"{phase} {n:,.0f}"
                                                    for phase, n in by_phase.items() if n))
    payload: dict[str, Any] = {"instruction_rounds": rounds_each, "jobs": jobs_n,
                               "results": summary["after"]}
    if "before" in summary:
        payload["before"] = summary["before"]
        payload["after_over_before"] = {
            row: summary["after"]["instructions_a_job"][row]
            / summary["before"]["instructions_a_job"][row] for row in rows_run}
    path = write_results(out, payload)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
