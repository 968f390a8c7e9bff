"""Fairness benchmark (job groups): how long small tenants' jobs wait behind one
tenant's backlog.

    .venv/bin/python bench/groups_bench.py [--backlog 100000] [--rounds 3] [--weights]
        [--quick] [--timeout-s 900]

An in-process :class:`broker.service.broker.Broker` on the local-file store (a fresh
temporary directory and queue per scenario and round, self-test off) serves 16 worker
threads (``--workers``), each claiming batches of 16 jobs (``--batch``: ``process()``'s
default ``batch_size``), long-polling 1 s when there is none, and completing each
batch after a fixed 2 ms (``--work-ms``) of "work". Scenarios, all at one priority:

* ``baseline``: tenants B to K (groups ``B`` .. ``K``) push 100 jobs each (10 pushes
  at once, one per tenant) into an empty queue the workers are polling;
* ``backlog``: tenant A (group ``A``) first pushes ``--backlog`` jobs (100,000;
  ``--quick``: 10,000) in one push, as the API takes it: by reference into segment
  objects where the broker does that for grouped jobs, else into the queue object;
  then the workers start and B to K push as in ``baseline``;
* ``weights`` (``--weights``): ``backlog`` on a queue created with ``group_weights``
  A: 1, B..K: 4; skipped with a plain message when the broker refuses the setting.

A job's wait is the moment its claim was answered to a worker minus the moment its
push was answered (``time.perf_counter``, one process). A scenario ends when all of
B to K's 1,000 jobs are completed (or past ``--timeout-s``: the row then says how
many were claimed, and their waits are of those only); A's jobs left pending then
are dropped with the queue. Measured per scenario: ``p50_wait_ms`` and
``p95_wait_ms`` of B to K's jobs (over every round's jobs together, and per round),
``a_throughput_jobs_s`` (A's jobs completed over the scenario's seconds, workers
started to B-K done) and ``a_completed``. ``p95_ratio`` is the median over rounds
of the backlog's p95 over the baseline's in the same round (the acceptance: at most
2.0); rounds are interleaved (the order of the scenarios turning each round).

Prints a table and writes bench/results/groups_fairness.json (``--quick``:
groups_fairness_quick.json). Times are in the unit their name ends with.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import load, write_results
from bench._measure import progress
from broker.errors import OsqueueError
from broker.model.ops import CompleteItems, NewJob
from broker.service.broker import Broker
from broker.service.config import BrokerConfig
from broker.storage import store_from_url

QUEUE = "fair"
TENANTS = tuple("BCDEFGHIJK")
SMALL_JOBS = 100
LEASE_S = 600.0
#: seconds a worker's claim waits for a job when there is none
POLL_S = 1.0


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by the nearest-rank rule; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.999999) - 1))]


class Loop:
    """An asyncio loop in a thread of its own, running one broker: what the worker
    threads call into, as clients of a broker process would."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Any) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def run_scenario(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One scenario on a fresh store, queue and broker; its row (see the module doc)."""
    tmp = Path(tempfile.mkdtemp(prefix="groups-bench-"))
    loop = Loop()
    # (A's backlog goes by reference into grouped segments, not into the head)
    broker = Broker(store_from_url(f"file://{tmp}"), BrokerConfig(
        self_test=False, grouped_segments=True))
    row: dict[str, Any] = {"scenario": name}
    try:
        loop.call(broker.start())
        settings: dict[str, Any] = {"max_state_bytes": 1 << 40}
        if name == "weights":
            settings["group_weights"] = {"A": 1, **dict.fromkeys(TENANTS, 4)}
        try:
            loop.call(broker.create_queue(QUEUE, settings))
        except OsqueueError as exc:
            row["skipped"] = f"the broker refuses group_weights: {str(exc)[:200]}"
            return row
        backlog = args.backlog if name != "baseline" else 0
        if backlog:
            t0 = time.perf_counter()
            a_ids = loop.call(broker.push(QUEUE, [
                NewJob(b'{"tenant":"A","n":%d}' % i, group="A") for i in range(backlog)]))
            row["a_push_s"] = time.perf_counter() - t0
            a_set = set(a_ids)
        else:
            a_set = set()
        pushed_at: dict[str, float] = {}
        claimed_at: dict[str, float] = {}
        lock = threading.Lock()
        small_done = threading.Event()
        stop = threading.Event()
        counts = {"a_completed": 0, "small_completed": 0}
        small_total = SMALL_JOBS * len(TENANTS)

        errors: list[str] = []

        def worker(i: int) -> None:
            try:
                work(i)
            except Exception as exc:  # the row says why; the scenario stops
                errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                stop.set()
                small_done.set()

        def work(i: int) -> None:
            while not stop.is_set():
                jobs = loop.call(broker.claim(QUEUE, f"w{i}", args.batch, lease_s=LEASE_S,
                                              wait_s=POLL_S))
                now = time.perf_counter()
                if not jobs:
                    continue
                ids = list(jobs.ids) if hasattr(jobs, "ids") else [j.id for j in jobs]
                with lock:
                    for job_id in ids:
                        if job_id not in a_set:
                            claimed_at.setdefault(job_id, now)
                time.sleep(args.work_ms / 1000)  # the job's "work": no broker call
                tokens = [j.token for j in jobs]
                answers = loop.call(broker.complete(QUEUE, CompleteItems(
                    tokens, [None] * len(tokens))))
                if not all(a.ok for a in answers):
                    raise RuntimeError(f"a complete answered {answers[0]!r}")
                with lock:
                    a_n = sum(1 for job_id in ids if job_id in a_set)
                    counts["a_completed"] += a_n
                    counts["small_completed"] += len(ids) - a_n
                    if counts["small_completed"] >= small_total:
                        small_done.set()

        threads = [threading.Thread(target=worker, args=(i,), daemon=True)
                   for i in range(args.workers)]
        start = time.perf_counter()
        for t in threads:
            t.start()

        async def push_small(tenant: str) -> None:
            ids = await broker.push(QUEUE, [
                NewJob(b'{"tenant":"%s","n":%d}' % (tenant.encode(), i), group=tenant)
                for i in range(SMALL_JOBS)])
            now = time.perf_counter()
            for job_id in ids:
                pushed_at[job_id] = now

        async def push_all() -> None:
            await asyncio.gather(*(push_small(t) for t in TENANTS))

        loop.call(push_all())
        finished = small_done.wait(args.timeout_s) and not errors
        elapsed = time.perf_counter() - start
        stop.set()
        for t in threads:
            t.join()
        with lock:
            waits = [(claimed_at[j] - pushed_at[j]) * 1e3 for j in pushed_at if j in claimed_at]
            row.update(counts)
        row.update(finished=finished, seconds=elapsed, small_claimed=len(waits),
                   waits_ms=waits, p50_wait_ms=percentile(waits, 0.5),
                   p95_wait_ms=percentile(waits, 0.95), backlog=backlog,
                   a_throughput_jobs_s=counts["a_completed"] / elapsed if backlog else None)
        if errors:
            row["error"] = errors[0]
        if not finished:
            row["stopped"] = f"timeout ({args.timeout_s:g} s): {len(waits)} of " \
                             f"{small_total} B-K jobs claimed"
        return row
    finally:
        try:
            loop.call(broker.stop())
        finally:
            loop.close()
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--backlog", type=int, help="A's jobs (default 100,000; --quick 10,000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--workers", type=int, default=16, help="worker threads (default 16)")
    p.add_argument("--batch", type=int, default=16, help="jobs a claim takes (default 16)")
    p.add_argument("--work-ms", type=float, default=2.0, help="ms of work per batch")
    p.add_argument("--weights", action="store_true",
                   help="also the backlog with group_weights A:1, B..K:4")
    p.add_argument("--timeout-s", type=float, default=900.0,
                   help="stop a scenario past this many seconds (default 900)")
    p.add_argument("--quick", action="store_true", help="A's backlog of 10,000")
    p.add_argument("--out", help="results name under bench/results (default "
                   "groups_fairness, groups_fairness_quick with --quick)")
    args = p.parse_args()
    args.backlog = args.backlog or (10_000 if args.quick else 100_000)
    if args.rounds < 1 or args.workers < 1 or not 1 <= args.batch <= 10_000 \
            or args.backlog < 1 or args.work_ms < 0:
        p.error("--rounds, --workers and --backlog must be at least 1, --batch within "
                "1..10000 and --work-ms not negative")
    names = ["baseline", "backlog"] + (["weights"] if args.weights else [])
    per_round: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    loads = []
    skipped: dict[str, str] = {}
    for r in range(args.rounds):
        turn = r % len(names)
        for name in names[turn:] + names[:turn]:
            if name in skipped:
                continue
            progress(f"round {r + 1}: {name}")
            row = run_scenario(name, args)
            if "skipped" in row:
                skipped[name] = row["skipped"]
                print(f"{name}: skipped: {row['skipped']}", flush=True)
                continue
            per_round[name].append(row)
            progress(f"round {r + 1}: {name}: p95 wait {row['p95_wait_ms']:.0f} ms in "
                     f"{row['seconds']:.1f} s")
        loads.append(load()[0])

    summary: dict[str, dict[str, Any]] = {}
    for name, rows in per_round.items():
        if not rows:
            continue
        waits = [w for row in rows for w in row["waits_ms"]]
        tputs = [row["a_throughput_jobs_s"] for row in rows
                 if row["a_throughput_jobs_s"] is not None]
        summary[name] = {
            "p50_wait_ms": percentile(waits, 0.5), "p95_wait_ms": percentile(waits, 0.95),
            "p95_wait_ms_each": [row["p95_wait_ms"] for row in rows],
            "seconds_each": [row["seconds"] for row in rows],
            "a_throughput_jobs_s": statistics.median(tputs) if tputs else None,
            "a_completed_each": [row["a_completed"] for row in rows],
            "finished_each": [row["finished"] for row in rows],
        }
    base = per_round["baseline"]
    for name in names[1:]:
        rows = per_round[name]
        if not rows:
            continue
        n = min(len(rows), len(base))
        ratios = [rows[i]["p95_wait_ms"] / base[i]["p95_wait_ms"] for i in range(n)
                  if rows[i]["p95_wait_ms"] is not None and base[i]["p95_wait_ms"]]
        summary[name]["p95_ratio_each"] = ratios
        summary[name]["p95_ratio"] = statistics.median(ratios) if ratios else None

    print(f"{'scenario':<9} {'p50 wait ms':>11} {'p95 wait ms':>11} {'p95 ratio':>9}"
          f" {'A jobs/s':>9} {'finished':>8}")
    for name, s in summary.items():
        ratio = s.get("p95_ratio")
        tput = s["a_throughput_jobs_s"]
        print(f"{name:<9} {s['p50_wait_ms']:>11.1f} {s['p95_wait_ms']:>11.1f}"
              f" {'-' if ratio is None else format(ratio, '.2f'):>9}"
              f" {'-' if tput is None else format(tput, ',.0f'):>9}"
              f" {all(s['finished_each'])!s:>8}")
    for name, why in skipped.items():
        print(f"{name}: skipped: {why}")
    print(f"wait: claim answered - push answered, B-K's {SMALL_JOBS * len(TENANTS):,} jobs;"
          f" p95 ratio: median over rounds of the scenario's p95 over baseline's"
          f" (acceptance <= 2.0); A's backlog {args.backlog:,}")
    config = {"backlog": args.backlog, "rounds": args.rounds, "workers": args.workers,
              "batch": args.batch, "work_ms": args.work_ms, "timeout_s": args.timeout_s,
              "tenants": list(TENANTS), "jobs_per_tenant": SMALL_JOBS, "poll_s": POLL_S,
              "store": "file"}
    rounds_out = {name: [{k: v for k, v in row.items() if k != "waits_ms"} for row in rows]
                  for name, rows in per_round.items()}
    path = write_results(args.out or ("groups_fairness_quick" if args.quick
                                      else "groups_fairness"),
                         {"config": config, "summary": summary, "skipped": skipped,
                          "rounds": rounds_out, "load_rounds": loads})
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
