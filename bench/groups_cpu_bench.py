"""Grouped claims' broker CPU against ungrouped, in-process: no HTTP, no load generator.

    .venv/bin/python bench/groups_cpu_bench.py [--rounds 5] [--profile ROW] [--baseline DIR]

``bench/broker_bench.py --only groups`` measures claims/s over loopback with a
load generator beside the broker; on a shared two-core machine its rounds swing
widely. This runs the same cycles inside one process (a Broker on a file store
in a temporary directory, asyncio clients calling it directly), each run a
child process, and counts the process's CPU seconds: 16 clients, each 40 times
push 100 jobs (JSON jobs, spread over the row's groups as the load generator
spreads them), claim 100, complete them. Every grouped row runs beside the
ungrouped twin in interleaved rounds; a row's figure is the median of the
rounds' grouped / ungrouped jobs per CPU second (the bar of job groups' cost: >= 0.8).
``--profile ROW`` runs one row once under cProfile and prints the top functions
(tottime). ``--baseline DIR``: every row also runs DIR's broker (another
checkout), in the same interleaved rounds: its figures go in the results as
``before``. Writes bench/results/groups_cpu.json (or ``--out NAME``: NAME.json).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: row -> (groups, group_limit): 0 groups is the ungrouped twin.
ROWS = {"ungrouped": (0, None), "groups1000": (1000, None), "groups100": (100, None),
        "groups1000-limit2": (1000, 2)}
CLIENTS, ROUNDS_EACH, BATCH = 16, 40, 100


async def _run(groups: int, limit: int | None, tmp: str) -> float:
    """Jobs per CPU second of the cycles (imports whichever broker is first on the path)."""
    import orjson

    from broker.model.ops import CompleteItem, NewJob
    from broker.service.broker import Broker
    from broker.service.config import BrokerConfig
    from broker.storage import FileStore

    def jobs_of(n: int) -> list[NewJob]:
        return [NewJob(orjson.dumps({"n": i, "doc": f"doc-{i}"}),
                       group=f"g{(n * BATCH + i) % groups:05d}" if groups else None)
                for i in range(BATCH)]

    broker = Broker(FileStore(tmp), BrokerConfig(url="http://in-process", self_test=False))
    await broker.start()
    await broker.create_queue("bench", {} if limit is None else {"group_limit": limit})
    bodies = [jobs_of(n) for n in range(CLIENTS)]

    async def client(n: int) -> None:
        for i in range(ROUNDS_EACH):
            await broker.push("bench", bodies[n], f"p-{n}-{i}", 2 * i)
            got = await broker.claim("bench", f"w{n}", BATCH, request=f"c-{n}-{i}",
                                     floor=2 * i + 1)
            await broker.complete("bench", [CompleteItem(j.token, b"1") for j in got])

    cpu0 = time.process_time()
    await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    cpu = time.process_time() - cpu0
    await broker.stop()
    return CLIENTS * ROUNDS_EACH * BATCH / cpu


def _child(row: str, root: Path = ROOT) -> float:
    """One run of ``row`` in a child process importing the broker of ``root``."""
    from bench._common import child_output
    return float(child_output(__file__, root, "--child", row).split()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="groups_cpu",
                   help="the results file's name under bench/results/ (default %(default)s)")
    p.add_argument("--child", choices=list(ROWS), help=argparse.SUPPRESS)
    p.add_argument("--profile", choices=list(ROWS), help="profile one run of this row")
    p.add_argument("--baseline", type=Path,
                   help="another checkout whose broker runs every row too, in the same "
                        "interleaved rounds (before and after, one run)")
    args = p.parse_args()
    if args.child or args.profile:
        with tempfile.TemporaryDirectory(prefix="osq-groups-cpu-") as tmp:
            if args.profile:
                import cProfile
                import pstats
                prof = cProfile.Profile()
                prof.enable()
                rate = asyncio.run(_run(*ROWS[args.profile], tmp))
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
                print(f"{args.profile}: {rate:,.0f} jobs/cpu-s (under the profiler)")
            else:
                print(asyncio.run(_run(*ROWS[args.child], tmp)))
        return
    sys.path.insert(0, str(ROOT))
    from bench._common import write_results
    trees = {"after": ROOT} if args.baseline is None else {"before": args.baseline, "after": ROOT}
    runs = {tree: {row: [] for row in ROWS} for tree in trees}
    ratios = {tree: {row: [] for row in ROWS if row != "ungrouped"} for tree in trees}
    for n in range(args.rounds):
        order = [(tree, row) for row in ROWS for tree in trees]
        for tree, row in order if n % 2 == 0 else order[::-1]:
            runs[tree][row].append(_child(row, trees[tree]))
        for tree in trees:
            for row in ratios[tree]:
                ratios[tree][row].append(runs[tree][row][-1] / runs[tree]["ungrouped"][-1])
            print(f"round {n + 1} {tree:<6} " + "  ".join(
                f"{row} {runs[tree][row][-1]:,.0f}" for row in ROWS) + " jobs/cpu-s", flush=True)
    summaries: dict[str, dict[str, dict[str, object]]] = {}
    print("== summary (jobs per CPU second; ratio: median of the rounds' grouped / ungrouped)")
    for tree in trees:
        summary = summaries[tree] = {}
        for row in ROWS:
            summary[row] = {"jobs_per_cpu_s": statistics.median(runs[tree][row]),
                            "rounds": runs[tree][row]}
            line = f"{tree:<6} {row:<20} {summary[row]['jobs_per_cpu_s']:>9,.0f} jobs/cpu-s"
            if row in ratios[tree]:
                summary[row]["grouped_over_ungrouped"] = statistics.median(ratios[tree][row])
                line += f"  grouped_over_ungrouped {summary[row]['grouped_over_ungrouped']:.3f}"
            print(line)
    payload: dict[str, object] = {"rounds": args.rounds, "results": summaries["after"]}
    if args.baseline is not None:
        payload.update(baseline=str(args.baseline), before=summaries["before"])
    path = write_results(args.out, payload)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
