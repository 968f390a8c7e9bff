"""The broker's own CPU per job, this tree against another checkout: in-process, no HTTP.

    .venv/bin/python bench/broker_cpu_ab.py --baseline /work/base-1a [--rounds 5]

``bench/broker_bench.py --only ab`` measures jobs/s over loopback with a load
generator beside the broker; on a shared two-core machine its round ratios
swing by +-25%. This runs the same shapes of work inside one process (a
Broker on a file store in a temporary directory, asyncio clients calling it
directly), each run a child process with the tree under test first on
``PYTHONPATH``, and counts the process's CPU seconds (the store's executor
threads included), so another engineer's load moves it much less:

* ``push-b100-c64-lines``: 64 clients, each 100 pushes of 100 bare staged
  lines (parsed as the HTTP route parses them), each with a request key;
* ``cycle-b100-c16``: 16 clients, each 80 times: push 100 lines, claim 100,
  complete them.

Rounds interleave the trees (the order flips each round); a row's ratio is the
median of the rounds' ratios (after / before, jobs per CPU second: above 1 is
better). Writes bench/results/broker_cpu_ab.json (or ``--out NAME``: NAME.json).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

# (not put on sys.path here: a child run imports the broker of the tree on PYTHONPATH)
ROOT = Path(__file__).resolve().parent.parent

#: row -> (mode, clients, rounds of work each client does)
ROWS = {"push-b100-c64-lines": ("push", 64, 100), "cycle-b100-c16": ("cycle", 16, 80)}


async def _run(mode: str, clients: int, pushes: int, tmp: str) -> float:
    """Jobs per CPU second of ``clients`` clients doing ``pushes`` rounds of ``mode``
    (imports whichever broker is first on the path)."""
    import orjson

    from broker.model.checks import parse_staged
    from broker.model.ops import CompleteItem
    from broker.service.broker import Broker
    from broker.service.config import BrokerConfig
    from broker.storage import FileStore

    body = b"".join(b"\t" + orjson.dumps({"n": i, "doc": f"doc-{i}"}) + b"\n"
                    for i in range(100))
    broker = Broker(FileStore(tmp), BrokerConfig(url="http://in-process", self_test=False))
    await broker.start()
    await broker.push("bench", [b"{}"])  # (the queue exists before the clock starts)
    limit = broker.config.max_request_bytes

    async def client(n: int) -> None:
        for i in range(pushes):
            jobs = parse_staged(body, check=True, max_payload_bytes=limit, where="line")
            await broker.push("bench", jobs, f"p-{n}-{i}", 2 * i)
            if mode == "cycle":
                got = await broker.claim("bench", f"w{n}", 100, request=f"c-{n}-{i}",
                                         floor=2 * i + 1)
                await broker.complete("bench", [CompleteItem(j.token, b"1") for j in got])

    cpu0 = time.process_time()
    await asyncio.gather(*(client(n) for n in range(clients)))
    cpu = time.process_time() - cpu0
    await broker.stop()
    return clients * pushes * 100 / cpu


def _child(root: Path, row: str) -> float:
    from bench._common import child_output
    return float(child_output(__file__, root, "--child", row).split()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, help="the checkout to compare with")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="broker_cpu_ab",
                   help="the results file's name under bench/results/ (default %(default)s)")
    p.add_argument("--child", choices=list(ROWS), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:  # one run, in this process: print jobs per CPU second
        with tempfile.TemporaryDirectory(prefix="osq-cpu-ab-") as tmp:
            print(asyncio.run(_run(*ROWS[args.child], tmp)))
        return
    if args.baseline is None:
        p.error("--baseline is required")
    sys.path.insert(0, str(ROOT))
    from bench._common import median_ratio, write_results
    table: dict[str, dict[str, list[float]]] = {row: {"before": [], "after": []} for row in ROWS}
    for n in range(args.rounds):
        for row, cell in table.items():
            order = [("before", args.baseline), ("after", ROOT)]
            for label, root in order if n % 2 == 0 else order[::-1]:
                cell[label].append(_child(root, row))
            print(f"round {n + 1} {row:<22} before {cell['before'][-1]:>9,.0f}  after "
                  f"{cell['after'][-1]:>9,.0f} jobs/cpu-s  ratio "
                  f"{cell['after'][-1] / cell['before'][-1]:.3f}", flush=True)
    summary = {}
    print("== summary (jobs per CPU second; ratio: median of the rounds' after / before)")
    for row, cell in table.items():
        ratio = median_ratio(cell["after"], cell["before"])
        summary[row] = {"before_jobs_per_cpu_s": statistics.median(cell["before"]),
                        "after_jobs_per_cpu_s": statistics.median(cell["after"]),
                        "median_ratio": ratio, "rounds_before": cell["before"],
                        "rounds_after": cell["after"]}
        print(f"{row:<22} before {summary[row]['before_jobs_per_cpu_s']:>9,.0f}  after "
              f"{summary[row]['after_jobs_per_cpu_s']:>9,.0f}  ratio {ratio:.3f}")
    path = write_results(args.out, {"baseline": str(args.baseline), "results": summary})
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
