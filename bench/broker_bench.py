"""Broker benchmark: a real broker process over loopback, driven by bench/loadgen.py.

    .venv/bin/python bench/broker_bench.py [--seconds 3] [--quick]

Side by side in one run, on the file store (a fresh directory per scenario):

1. the ceiling: a do-nothing Starlette endpoint driven by the same generator;
2. the broker: single-job and 100-job requests, push-only and the closed
   push -> claim -> complete cycle, at 1, 16, 64 and 256 clients;
3. the broker with 50 ms and 200 ms injected CAS write latency (cycle);
4. the broker's in-process API with the same closed-loop clients (no HTTP);
5. the ablation: each client doing its own CAS per operation (no broker);
6. the headline figures at 64 clients (the ceiling, single-job pushes and cycles,
   100-job pushes, the in-process cycle, the ablation) in ``--rounds`` interleaved
   rounds (default 3), each ratio the median of the rounds' ratios.

With ``--baseline DIR`` (another checkout, e.g. ``git worktree add /tmp/before
<commit>``) it instead runs the happy-path scenarios against that tree's broker
and this one, interleaved round by round, and prints this tree's figures as a
fraction of the baseline's (``--only ab``). Injected latency applies to every
store write here (archive objects included).

``--only bigpush`` (with ``--baseline``): does a push large in bytes leave the
head small? Both brokers in turn, interleaved: 400 jobs of 200 KB pushed with
this tree's client (requests of at most 8 MiB), then the queue object's bytes and the
median of 20 single small pushes after them (each one commit rewriting the
head). Writes bench/results/broker_bigpush.json.

``--only groups``: claims/s of grouped cycles (:data:`GROUP_SCENARIOS`) against their
ungrouped twins, interleaved; with ``--baseline DIR`` that tree's broker runs every
cycle too, in the same rounds, each tree's grouped/ungrouped ratio in the results
(bench/results/broker_groups.json, or ``--out NAME``: NAME.json). Beside it, the
same ratio by the broker's own CPU an operation (ungrouped over grouped, the median
of the rounds' ratios): on two shared cores both swing by a fifth from round to
round; bench/groups_model_bench.py --instructions is the deterministic figure.

Prints tables and writes bench/results/broker_bench.json (or broker_ab.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from bench._common import in_rounds, median_ratio, write_results  # noqa: E402
from bench.loadgen import pct  # noqa: E402
from broker.model.ops import Claim, Complete, CompleteItem, NewJob, Push  # noqa: E402
from broker.service.broker import Broker  # noqa: E402
from broker.service.config import BrokerConfig  # noqa: E402
from broker.storage import FileStore  # noqa: E402
from tests.support.broker_process import READY  # noqa: E402
from tests.support.direct import DirectQueue  # noqa: E402


class Server:
    """``bench/servers.py`` in a child process; ``root``: the checkout whose broker
    package it serves (the servers and load generator are always this tree's)."""

    def __init__(self, *args: str, root: Path = ROOT) -> None:
        env = {**os.environ, "OSQ_BENCH_ROOT": str(root)}
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "servers.py"), *args],
                                     stderr=subprocess.PIPE, text=True, cwd=root, env=env)
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            m = READY.search(line)
            if m:
                self.url = m.group(1)
                break
        else:
            raise RuntimeError(f"server {args} did not start")
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system) the server process has used so far, or
        None where ``/proc`` cannot tell."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def loadgen(url: str, mode: str, clients: int, seconds: float, batch: int = 1,
            body: str = "json", extra: tuple[str, ...] = (), fill: int = 0) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "loadgen.py"), url, "--mode", mode,
         "--clients", str(clients), "--seconds", str(seconds), "--batch", str(batch),
         "--body", body, "--fill", str(fill), *extra],
        capture_output=True, text=True, check=True, timeout=seconds * 10 + 120)
    result: dict[str, Any] = json.loads(out.stdout)
    if result["errors"]:
        print(f"  ! errors: {result['errors']}", file=sys.stderr)
    return result


def broker_run(mode: str, clients: int, seconds: float, batch: int = 1,
               latency_ms: float = 0.0, body: str = "json",
               root: Path = ROOT, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="osq-bench-") as tmp:
        args = ["broker", "--store", f"file://{tmp}"]
        if latency_ms:
            args += ["--write-latency-ms", str(latency_ms)]
        server = Server(*args, root=root)
        try:
            if mode == "process":  # (the deep queue, filled before the broker's CPU is read)
                loadgen(server.url, "fill", 1, seconds, fill=PROCESS_FILL)
            cpu0, wall0 = server.cpu_s(), time.perf_counter()
            result = loadgen(server.url, mode, clients, seconds, batch, body, extra)
            cpu1, wall = server.cpu_s(), time.perf_counter() - wall0
        finally:
            server.stop()
        if cpu0 is not None and cpu1 is not None:
            # the broker's own cost: CPU per job over the whole load run (its
            # warm-up included, at the measured rate), steadier than jobs/s on a
            # shared machine where the load generator competes for the cores
            jobs = sum(result[op]["jobs_per_s"] for op in ("push", "claim", "complete")
                       if op in result) * wall
            result["broker_cpu_us_per_job"] = (cpu1 - cpu0) / jobs * 1e6 if jobs else None
        return result


def noop_run(clients: int, seconds: float) -> dict[str, Any]:
    server = Server("noop")
    try:
        return loadgen(server.url, "noop", clients, seconds)
    finally:
        server.stop()


# -- in-process API ------------------------------------------------------------------

async def _inprocess(store_dir: str, clients: int, seconds: float) -> dict[str, Any]:
    broker = Broker(FileStore(store_dir), BrokerConfig(url="http://in-process", self_test=False))
    await broker.start()
    lat: dict[str, list[float]] = {"push": [], "claim": [], "complete": []}
    stop_at = time.perf_counter() + seconds
    payload = orjson.dumps({"n": 0, "doc": "doc-0"})

    async def client(n: int) -> None:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await broker.push("bench", [NewJob(payload)])
            t1 = time.perf_counter()
            jobs = await broker.claim("bench", f"w{n}", 1, 60.0)
            t2 = time.perf_counter()
            lat["push"].append(t1 - t0)
            lat["claim"].append(t2 - t1)
            if jobs:
                await broker.complete("bench", [CompleteItem(jobs[0].token, b"1")])
                lat["complete"].append(time.perf_counter() - t2)

    start = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    elapsed = time.perf_counter() - start
    await broker.stop()
    return {op: {"requests": len(v), "req_per_s": len(v) / elapsed, "jobs_per_s": len(v) / elapsed,
                 "p50_ms": pct(v, 0.5) * 1000, "p99_ms": pct(v, 0.99) * 1000}
            for op, v in lat.items()} | {"clients": clients, "seconds": elapsed}


def inprocess_run(clients: int, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="osq-bench-") as tmp:
        return asyncio.run(_inprocess(tmp, clients, seconds))


# -- ablation: every client does its own CAS -------------------------------------------

def direct_run(clients: int, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="osq-bench-") as tmp:
        store = FileStore(tmp)
        lat: dict[str, list[float]] = {"push": [], "claim": [], "complete": []}
        conflicts = [0]
        lock = threading.Lock()
        stop_at = time.perf_counter() + seconds
        payload = orjson.dumps({"n": 0, "doc": "doc-0"})

        def client(n: int) -> None:
            q = DirectQueue(store, "bench", writer=f"d{n}")
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                q.apply(Push((NewJob(payload),)))
                t1 = time.perf_counter()
                got = q.apply(Claim(f"w{n}", 1, 60_000)).jobs
                t2 = time.perf_counter()
                with lock:
                    lat["push"].append(t1 - t0)
                    lat["claim"].append(t2 - t1)
                if got:
                    q.apply(Complete((CompleteItem(got[0].token),)))
                    with lock:
                        lat["complete"].append(time.perf_counter() - t2)
            with lock:
                conflicts[0] += q.conflicts

        start = time.perf_counter()
        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        return {op: {"requests": len(v), "req_per_s": len(v) / elapsed,
                     "jobs_per_s": len(v) / elapsed,
                     "p50_ms": pct(v, 0.5) * 1000, "p99_ms": pct(v, 0.99) * 1000}
                for op, v in lat.items()} | {"clients": clients, "seconds": elapsed,
                                             "conflicts": conflicts[0]}


def ops_per_s(r: dict[str, Any]) -> float:
    return sum(r[op]["req_per_s"] for op in ("push", "claim", "complete") if op in r)


def row(label: str, r: dict[str, Any]) -> str:
    cells = [f"{label:<34}"]
    for op in ("push", "claim", "complete", "noop"):
        if op in r:
            x = r[op]
            cells.append(f"{op}: {x['req_per_s']:>8,.0f} req/s {x['jobs_per_s']:>9,.0f} jobs/s "
                         f"p50 {x['p50_ms']:>7.1f} p99 {x['p99_ms']:>7.1f} ms")
    return "  ".join(cells)


#: Jobs in the queue before the ``process`` scenario starts (more than 8 clients
#: drain in its seconds).
PROCESS_FILL = 400_000

#: The happy-path scenarios of the A/B comparison: (mode, batch, clients, body).
#: ``process``: process() with claims of 2,000 (claim 2,000 from a deep queue,
#: complete them, 8 clients; see bench/loadgen.py).
AB_SCENARIOS = [("push", 1, 64, "json"), ("cycle", 1, 64, "json"), ("cycle", 1, 1, "json"),
                ("push", 100, 64, "lines"), ("cycle", 100, 16, "json"),
                ("process", 2000, 8, "json")]


def ab_name(mode: str, batch: int, clients: int, body: str) -> str:
    """An A/B row's name, e.g. ``cycle-b1-c64-json``."""
    return f"{mode}-b{batch}-c{clients}-{body}"


def ab_compare(baseline: Path, seconds: float, rounds: int,
               rows: frozenset[str] | None = None, results: str = "broker_ab") -> None:
    """This tree's broker against ``baseline``'s, interleaved, medians of ``rounds``;
    only the rows named in ``rows`` (None: all); figures in ``bench/results/<results>.json``."""
    print(f"== A/B: this tree ({ROOT}) against {baseline}, {rounds} interleaved rounds")
    table: dict[str, dict[str, list[float]]] = {}
    scenarios = [s for s in AB_SCENARIOS if rows is None or ab_name(*s) in rows]
    for n in range(rounds):
        for mode, batch, clients, body in scenarios:
            name = ab_name(mode, batch, clients, body)
            cell = table.setdefault(name, {"before": [], "after": [], "cpu_before": [],
                                           "cpu_after": []})
            order = [("before", baseline), ("after", ROOT)]
            for label, root in (order if n % 2 == 0 else order[::-1]):
                r = broker_run(mode, clients, seconds, batch, body=body, root=root)
                cell[label].append(sum(r[op]["jobs_per_s"] for op in ("push", "claim",
                                                                       "complete") if op in r))
                if r.get("broker_cpu_us_per_job") is not None:
                    cell[f"cpu_{label}"].append(r["broker_cpu_us_per_job"])
            cpu = ""
            if cell["cpu_before"] and cell["cpu_after"]:
                cpu = (f"   broker CPU/job {cell['cpu_before'][-1]:6.1f} -> "
                       f"{cell['cpu_after'][-1]:6.1f} us")
            print(f"round {n + 1} {name:<26} before {cell['before'][-1]:>9,.0f} jobs/s   "
                  f"after {cell['after'][-1]:>9,.0f} jobs/s   "
                  f"ratio {cell['after'][-1] / cell['before'][-1]:.3f}{cpu}", flush=True)

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    summary = {}
    print("== A/B summary (medians; ratio = after / before; the broker's CPU per job is "
          "its own cost, less moved by a busy machine than jobs/s: cpu ratio = before / after, "
          "so above 1 is better, like the jobs/s ratio)")
    for name, cell in table.items():
        before, after = median(cell["before"]), median(cell["after"])
        ratios = [a / b for a, b in zip(cell["after"], cell["before"], strict=True)]
        summary[name] = {"before_jobs_per_s": before, "after_jobs_per_s": after,
                         "ratio_of_medians": after / before, "median_ratio": median(ratios),
                         "rounds_before": cell["before"], "rounds_after": cell["after"]}
        cpu = ""
        if len(cell["cpu_before"]) == len(cell["cpu_after"]) == rounds:
            cb, ca = median(cell["cpu_before"]), median(cell["cpu_after"])
            summary[name] |= {"before_cpu_us_per_job": cb, "after_cpu_us_per_job": ca,
                              "cpu_ratio": cb / ca, "cpu_rounds_before": cell["cpu_before"],
                              "cpu_rounds_after": cell["cpu_after"]}
            cpu = f"   broker CPU/job {cb:.1f} -> {ca:.1f} us (cpu ratio {cb / ca:.3f})"
        print(f"{name:<26} before {before:>9,.0f}  after {after:>9,.0f}  "
              f"ratio {after / before:.3f} (median of round ratios {median(ratios):.3f}){cpu}")
    path = write_results(results, {"seconds": seconds, "baseline": str(baseline),
                                   "results": summary})
    print(f"results written to {path}")


#: Grouped rows (job groups): (batch, clients, loadgen's group options), each beside its
#: ungrouped twin (no options) on this tree: cycles of push, claim, complete.
GROUP_SCENARIOS = [
    (1, 64, ("--groups", "1000")),
    (100, 16, ("--groups", "1000")),
    (100, 16, ("--groups", "100")),
    (100, 16, ("--groups", "1000", "--group-limit", "2")),
]


def groups_compare(seconds: float, rounds: int, baseline: Path | None = None,
                   out: str = "broker_groups") -> None:
    """Cycles of grouped jobs against their ungrouped twins on this tree, interleaved,
    medians of ``rounds``; the bar (design-31 §10.5): grouped >= 0.8 of ungrouped.
    With ``baseline`` (another checkout) its broker runs every cycle too, in the same
    rounds: its figures go in the results as ``before``, with each tree's ratio."""
    trees = {"after": ROOT} if baseline is None else {"before": baseline, "after": ROOT}
    print(f"== groups: grouped cycles against ungrouped ones, {rounds} interleaved rounds"
          + ("" if baseline is None else f", this tree ({ROOT}) and {baseline}"))
    table: dict[str, dict[str, dict[str, list[float]]]] = {tree: {} for tree in trees}
    for n in range(rounds):
        for batch, clients, options in GROUP_SCENARIOS:
            name = f"cycle-b{batch}-c{clients}{''.join(options).replace('--', '-')}"
            order = [(tree, label, extra) for tree in trees
                     for label, extra in (("ungrouped", ()), ("grouped", options))]
            for tree, label, extra in (order if n % 2 == 0 else order[::-1]):
                cell = table[tree].setdefault(
                    name, {"ungrouped": [], "grouped": [], "cpu_ungrouped": [], "cpu_grouped": []})
                r = broker_run("cycle", clients, seconds, batch, extra=extra, root=trees[tree])
                cell[label].append(r["claim"]["jobs_per_s"] if "claim" in r else 0.0)
                cell[f"cpu_{label}"].append(r.get("broker_cpu_us_per_job") or float("nan"))
            for tree in trees:
                cell = table[tree][name]
                print(f"round {n + 1} {tree:<6} {name:<44} claims/s ungrouped "
                      f"{cell['ungrouped'][-1]:>9,.0f}   grouped {cell['grouped'][-1]:>9,.0f}"
                      f"   ratio {cell['grouped'][-1] / max(cell['ungrouped'][-1], 1e-9):.3f}"
                      f"   broker CPU/op {cell['cpu_ungrouped'][-1]:.1f} / "
                      f"{cell['cpu_grouped'][-1]:.1f} us", flush=True)
    summaries: dict[str, dict[str, Any]] = {}
    for tree in trees:
        summary = summaries[tree] = {}
        for name, cell in table[tree].items():
            u, g = statistics.median(cell["ungrouped"]), statistics.median(cell["grouped"])
            # the broker's capacity ratio: its CPU an operation ungrouped over grouped,
            # the median of the rounds' ratios. Claims/s swing with the load generator,
            # which shares the two cores; the broker's own CPU a job swings far less.
            cpu = statistics.median(
                cu / cg for cu, cg in zip(cell["cpu_ungrouped"], cell["cpu_grouped"], strict=True))
            summary[name] = {"ungrouped_claims_per_s": u, "grouped_claims_per_s": g,
                             "grouped_over_ungrouped": g / u if u else None,
                             "grouped_over_ungrouped_by_cpu": cpu,
                             "ungrouped_cpu_us_per_op": statistics.median(cell["cpu_ungrouped"]),
                             "grouped_cpu_us_per_op": statistics.median(cell["cpu_grouped"]),
                             "rounds_ungrouped": cell["ungrouped"],
                             "rounds_grouped": cell["grouped"],
                             "rounds_cpu_ungrouped": cell["cpu_ungrouped"],
                             "rounds_cpu_grouped": cell["cpu_grouped"]}
            print(f"{tree:<6} {name:<44} ungrouped {u:>9,.0f}  grouped {g:>9,.0f}  "
                  f"grouped_over_ungrouped {g / u if u else float('nan'):.3f}  "
                  f"by broker CPU {cpu:.3f}")
    payload: dict[str, Any] = {"seconds": seconds, "results": summaries["after"]}
    if baseline is not None:
        payload.update(baseline=str(baseline), before=summaries["before"])
    path = write_results(out, payload)
    print(f"results written to {path}")


def bigpush_run(root: Path, jobs: int = 400, size: int = 200_000) -> dict[str, float]:
    """``jobs`` payloads of ``size`` bytes pushed to ``root``'s broker, then 20
    single small pushes: their times and the queue object's bytes after."""
    from osqueue_spark.client import QueueClient  # (this tree's client, whatever the broker)

    with tempfile.TemporaryDirectory(prefix="osq-bench-") as tmp:
        server = Server("broker", "--store", f"file://{tmp}", root=root)
        try:
            client = QueueClient(server.url, "big", retry_s=30, timeout_s=120)
            blob = "x" * size
            t0 = time.perf_counter()
            client.push_many([{"n": i, "blob": blob} for i in range(jobs)], batch_size=40)
            push_s = time.perf_counter() - t0
            head = os.path.getsize(Path(tmp) / "big" / "queue.json")
            small = []
            for i in range(20):
                t1 = time.perf_counter()
                client.push({"small": i})
                small.append(time.perf_counter() - t1)
            client.close()
        finally:
            server.stop()
    return {"push_s": push_s, "head_bytes": head, "small_push_ms": pct(small, 0.5) * 1000}


def bigpush_compare(baseline: Path, rounds: int) -> None:
    """:func:`bigpush_run` on the baseline's broker and this tree's, interleaved."""
    print(f"== big payloads: this tree ({ROOT}) against {baseline}, {rounds} rounds")
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    order = [("before", baseline), ("after", ROOT)]
    for n in range(rounds):
        for label, root in (order if n % 2 == 0 else order[::-1]):
            r = bigpush_run(root)
            runs[label].append(r)
            print(f"round {n + 1} {label:<6} push 400 x 200 KB {r['push_s']:6.2f} s   "
                  f"head {r['head_bytes'] / 1e3:10,.1f} KB   later small push "
                  f"{r['small_push_ms']:7.1f} ms (median of 20)", flush=True)
    summary = {label: {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0]}
               for label, rs in runs.items()}
    for label, figures in summary.items():
        print(f"{label:<6} median: push {figures['push_s']:.2f} s, head "
              f"{figures['head_bytes'] / 1e3:,.1f} KB, small push "
              f"{figures['small_push_ms']:.1f} ms")
    path = write_results("broker_bigpush", {"baseline": str(baseline), "rounds": runs,
                                            "medians": summary})
    print(f"results written to {path}")


def latency_run(latency_ms: float, clients: int, seconds: float) -> dict[str, Any]:
    """The closed-loop cycle with ``latency_ms`` added to every store write."""
    r = broker_run("cycle", clients, seconds, 1, latency_ms=latency_ms)
    for op in ("push", "claim", "complete"):
        r[op]["p50_x"] = r[op]["p50_ms"] / latency_ms
        r[op]["p99_x"] = r[op]["p99_ms"] / latency_ms
    return r


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--latency-seconds", type=float, default=8.0)
    p.add_argument("--quick", action="store_true", help="fewer client counts")
    p.add_argument("--baseline", type=Path, help="another checkout to compare with (A/B)")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved rounds of the A/B comparison and of the headline "
                        "figures at 64 clients (default 3)")
    p.add_argument("--rows", help="with --baseline: only these A/B rows, comma-separated "
                   f"(of {', '.join(ab_name(*s) for s in AB_SCENARIOS)}), figures written "
                   "to bench/results/broker_ab_rows.json (broker_ab.json keeps the full A/B)")
    p.add_argument("--out", help="with --only groups: the results file's name under "
                   "bench/results/ (default broker_groups)")
    p.add_argument("--only", choices=["ab", "latency", "bigpush", "groups"],
                   help="ab: only the A/B comparison; latency: only 200 ms at 256 clients; "
                        "bigpush: only big payloads against the baseline")
    args = p.parse_args()
    if args.only == "groups":
        groups_compare(args.seconds, args.rounds,
                       None if args.baseline is None else args.baseline.resolve(),
                       args.out or "broker_groups")
        return
    if args.only == "bigpush":
        if args.baseline is None:
            p.error("--only bigpush compares with --baseline DIR")
        bigpush_compare(args.baseline.resolve(), args.rounds)
        return
    if args.baseline is not None:
        rows = None if args.rows is None else frozenset(args.rows.split(","))
        if rows is not None and not rows <= {ab_name(*s) for s in AB_SCENARIOS}:
            p.error(f"--rows: no such A/B row among {sorted(rows)}")
        ab_compare(args.baseline.resolve(), args.seconds, args.rounds, rows,
                   "broker_ab" if rows is None else "broker_ab_rows")
        if args.only == "ab":
            return
    if args.only == "latency":
        r = latency_run(200, 256, args.latency_seconds)
        summary = {f"lat200_c256_{op}_{k}": r[op][k] for op in ("push", "claim", "complete")
                   for k in ("p50_ms", "p99_ms", "p50_x", "p99_x")}
        for k, v in summary.items():
            print(f"{k:<34} {v:,.3f}")
        write_results("broker_latency", {"seconds": args.latency_seconds, "results": summary})
        return
    counts = [1, 64] if args.quick else [1, 16, 64, 256]
    s = args.seconds
    results: dict[str, Any] = {"ceiling": {}, "file": {}, "latency": {}, "inprocess": {},
                               "ablation": {}}

    print("== bare Starlette ceiling (same load generator)")
    for c in counts:
        results["ceiling"][c] = r = noop_run(c, s)
        print(row(f"noop  clients={c}", r), flush=True)

    print("== broker on the file store")
    for c in counts:
        for mode, batch in (("push", 1), ("cycle", 1), ("push", 100), ("cycle", 100)):
            r = broker_run(mode, c, s, batch)
            results["file"][f"{mode}-b{batch}-c{c}"] = r
            print(row(f"{mode:<5} batch={batch:<3} clients={c}", r), flush=True)

    print("== broker with latency injected into every store write (closed-loop cycle, "
          "1 job a request)")
    for latency in (50, 200):
        for c in ([64, 256] if args.quick else [16, 64, 256]):
            r = latency_run(latency, c, args.latency_seconds)
            results["latency"][f"{latency}ms-c{c}"] = r
            mult = "  ".join(f"{op} p50 {r[op]['p50_x']:.2f}x p99 {r[op]['p99_x']:.2f}x"
                             for op in ("push", "claim", "complete"))
            print(f"latency {latency} ms clients={c:<4} {mult}", flush=True)

    print("== in-process API (no HTTP), closed-loop cycle")
    for c in counts:
        results["inprocess"][c] = r = inprocess_run(c, s)
        print(row(f"in-process clients={c}", r), flush=True)

    print("== ablation: each client does its own CAS per operation (no broker)")
    results["ablation"][64] = r = direct_run(64, s)
    print(row("direct CAS clients=64", r) + f"  conflicts={r['conflicts']}", flush=True)

    # The ceiling swings a lot between runs on a shared machine, so the headline
    # figures at 64 clients come from interleaved rounds: every comparison is of
    # figures of the same round (the median of the rounds' ratios)
    print(f"== at 64 clients, {args.rounds} interleaved rounds")
    c64 = 64
    headline = in_rounds({
        "ceiling": lambda: noop_run(c64, s)["noop"]["req_per_s"],
        "push": lambda: broker_run("push", c64, s, 1)["push"]["req_per_s"],
        "cycle": lambda: ops_per_s(broker_run("cycle", c64, s, 1)),
        "push100_json": lambda: broker_run("push", c64, s, 100)["push"]["jobs_per_s"],
        "push100_lines": lambda: broker_run("push", c64, s, 100,
                                            body="lines")["push"]["jobs_per_s"],
        "inprocess_cycle": lambda: ops_per_s(inprocess_run(c64, s)),
        "direct_cas": lambda: ops_per_s(direct_run(c64, s)),
    }, args.rounds)
    v = headline["values"]
    for n in range(args.rounds):
        print(f"round {n + 1}: " + "  ".join(f"{k} {v[k][n]:,.0f}" for k in v)
              + f"  (load {headline['load'][n]})", flush=True)
    results["interleaved_c64"] = headline
    summary = {
        "rounds": args.rounds,
        "ceiling_req_per_s_c64": statistics.median(v["ceiling"]),
        "push_single_req_per_s_c64": statistics.median(v["push"]),
        "push_single_fraction_of_ceiling": median_ratio(v["push"], v["ceiling"]),
        "push_single_fraction_of_ceiling_rounds": [a / b for a, b in zip(
            v["push"], v["ceiling"], strict=True)],
        "cycle_single_ops_per_s_c64": statistics.median(v["cycle"]),
        "cycle_single_fraction_of_ceiling": median_ratio(v["cycle"], v["ceiling"]),
        "push_batch100_json_jobs_per_s_c64": statistics.median(v["push100_json"]),
        "push_batch100_compact_jobs_per_s_c64": statistics.median(v["push100_lines"]),
        "push_batch100_compact_over_json": median_ratio(v["push100_lines"], v["push100_json"]),
        "inprocess_cycle_ops_per_s_c64": statistics.median(v["inprocess_cycle"]),
        "http_cost_ratio_c64": median_ratio(v["inprocess_cycle"], v["cycle"]),
        "direct_cas_ops_per_s_c64": statistics.median(v["direct_cas"]),
        "ablation_broker_over_direct_c64": median_ratio(v["cycle"], v["direct_cas"]),
        "push_batch100_json_jobs_per_s_c256": results["file"].get(
            "push-b100-c256", {}).get("push", {}).get("jobs_per_s"),
    }
    if "200ms-c256" in results["latency"]:
        r = results["latency"]["200ms-c256"]
        summary.update({f"lat200_c256_{op}_p99_x": r[op]["p99_x"]
                        for op in ("push", "claim", "complete")})
    results["summary"] = summary
    print("== summary")
    for k, x in summary.items():
        if isinstance(x, int | float):
            print(f"{k:<42} {x:,.3f}")
    path = write_results("broker_bench", {"seconds": s, "results": results})
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
