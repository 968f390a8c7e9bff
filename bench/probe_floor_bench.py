"""Probe floor benchmark: what the cores' contention alone does to the wide-queues
issue's probe, with the queue itself idle.

    .venv/bin/python bench/probe_floor_bench.py [--cycles 300] [--burners 2,3]
        [--spark-workers 2] [--rounds 2] [--out probe_floor]

The bad deploy's bar (bench/bad_deploy_bench.py) compares the probe's p99 during a
``process()`` with its p99 on an empty queue. A ``process()`` keeps the machine's
cores busy (Spark's JVM, its Python workers, the broker), so part of any slowdown
is the probe's threads waiting for a core, not the queue's work. This script
measures that part alone, on the embedded default (a broker in this process on
local files), always on an **empty** queue that nothing but the probe touches:

- ``quiet``: the probe alone (the bar's baseline, as bad_deploy_bench measures it);
- ``burners-K``: while K processes spin pure Python loops (no I/O, no queue);
- ``spark-busy``: while a local Spark job of ``--spark-workers`` tasks spins a pure
  Python loop in ``mapInPandas`` (the cores a ``process()`` occupies, with no
  queue work in it). Each task touches a marker file when it starts; the probe
  starts once every task has, and the tasks stop when the probe is done.

Each phase runs ``--rounds`` times, interleaved (quiet, burners..., spark-busy,
then again), ``--cycles`` probe cycles each (push 1, claim 1, complete 1: three
small commits a cycle, each timed). Figures per phase: p50/p99/max of the pooled
commits in ms, per round and pooled, and each phase's pooled p99 over quiet's
(``p99_ratio_to_quiet``: the issue's bar is 3). Prints a summary and writes
bench/results/<--out>.json.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import load, write_results
from bench._measure import progress
from bench.bad_deploy_bench import Probe, clear_probe_jobs, pct
from broker.storage import store_from_url
from osqueue_spark import QueueClient, start_broker
from osqueue_spark.session import local_session

QUEUE = "probe-floor"


def spin(started: Any, stop: Any) -> None:
    """A burner process: says it has started, then spins pure Python arithmetic
    until ``stop`` is set."""
    started.release()
    x = 0
    while not stop.is_set():
        for _ in range(10_000):
            x += 1


def spin_rows(marker_dir: str, stop_file: str) -> Any:
    """The Spark task's function: touch a marker, then spin until ``stop_file``
    exists (checked every ~10 ms of spinning), then yield its batches unchanged."""
    def fn(batches: Iterator[Any]) -> Iterator[Any]:
        import os
        import uuid

        Path(marker_dir, uuid.uuid4().hex).touch()
        x = 0
        while not os.path.exists(stop_file):
            for _ in range(50_000):
                x += 1
        yield from batches
    return fn


def probe_once(url: str, cycles: int) -> dict[str, Any]:
    probe = Probe(url, complete_foreign=True, queue=QUEUE)
    probe.run(cycles)
    probe.stop()  # (no thread was started: closes its client)
    return {"samples": probe.samples, **probe.figures()}


def with_burners(url: str, cycles: int, k: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    started, stop = ctx.Semaphore(0), ctx.Event()
    procs = [ctx.Process(target=spin, args=(started, stop), daemon=True) for _ in range(k)]
    for p in procs:
        p.start()
    try:
        for _ in procs:  # every burner is spinning (a spawn's start-up is busy too)
            if not started.acquire(timeout=60):
                raise RuntimeError("a burner process did not start")
        return probe_once(url, cycles)
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=30)


def with_spark(spark: Any, url: str, cycles: int, workers: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="osq-probe-floor-"))
    markers, stop_file = tmp / "markers", tmp / "stop"
    markers.mkdir()
    df = spark.range(workers, numPartitions=workers)
    job = df.mapInPandas(spin_rows(str(markers), str(stop_file)), schema=df.schema)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            job.collect()
        except BaseException as exc:  # reported after the probe
            failed.append(exc)

    thread = threading.Thread(target=run, name="spark-busy", daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while len(list(markers.iterdir())) < workers:  # every task is spinning
        if failed or time.monotonic() > deadline:
            stop_file.touch()
            raise RuntimeError(f"the Spark tasks did not start: {failed}")
        time.sleep(0.05)
    try:
        return probe_once(url, cycles)
    finally:
        stop_file.touch()
        thread.join(timeout=120)
        if failed:
            raise RuntimeError(f"the Spark job failed: {failed[0]!r}")


def pooled(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    samples = [s for r in rounds for s in r["samples"]]
    p50, p99 = pct(samples, 0.5), pct(samples, 0.99)
    assert p50 is not None and p99 is not None  # (every round ran at least one cycle)
    return {"commits": len(samples), "p50_ms": p50 * 1e3,
            "p99_ms": p99 * 1e3, "max_ms": max(samples) * 1e3,
            "rounds": [{k: v for k, v in r.items() if k != "samples"} for r in rounds]}


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--cycles", type=int, default=300, help="probe cycles a phase and round")
    p.add_argument("--burners", default="2,3", help="burner process counts, comma separated")
    p.add_argument("--spark-workers", type=int, default=2,
                   help="Spark tasks spinning in spark-busy (0: no Spark phase)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of every phase")
    p.add_argument("--out", default="probe_floor", help="results name under bench/results")
    args = p.parse_args()
    burners = [int(b) for b in args.burners.split(",") if b.strip()]
    if args.cycles < 1 or args.rounds < 1 or any(b < 1 for b in burners):
        p.error("--cycles, --rounds and every --burners count must be at least 1")

    spark = local_session("osqueue-probe-floor", cores=args.spark_workers) \
        if args.spark_workers else None
    store_url = f"file://{Path(tempfile.mkdtemp(prefix='osq-probe-floor-')) / 'store'}"
    phases: dict[str, list[dict[str, Any]]] = {"quiet": []}
    for k in burners:
        phases[f"burners-{k}"] = []
    if spark is not None:
        phases["spark-busy"] = []
    loads: list[float] = []
    with start_broker(store_from_url(store_url)) as broker:
        client = QueueClient(broker.url, QUEUE)
        client.create(max_attempts=2)
        probe_once(broker.url, 20)  # warm: connections, the queue's first commits
        for r in range(args.rounds):
            for name in phases:
                progress(f"round {r + 1}: {name}")
                if name == "quiet":
                    got = probe_once(broker.url, args.cycles)
                elif name == "spark-busy":
                    got = with_spark(spark, broker.url, args.cycles, args.spark_workers)
                else:
                    got = with_burners(broker.url, args.cycles, int(name.split("-")[1]))
                phases[name].append(got)
                clear_probe_jobs(client)
            loads.append(load()[0])
        counts = client.stats()["counts"]
        client.close()
    if spark is not None:
        spark.stop()
    res: dict[str, Any] = {"cycles": args.cycles, "rounds": args.rounds, "store": "file",
                           "broker": "embedded", "load_after_rounds": loads,
                           "counts_at_end": counts, "phases": {}}
    for name, rounds in phases.items():
        res["phases"][name] = pooled(rounds)
    quiet = res["phases"]["quiet"]["p99_ms"]
    for name, ph in res["phases"].items():
        ph["p99_ratio_to_quiet"] = ph["p99_ms"] / quiet
        print(f"{name:>12}: p50 {ph['p50_ms']:.1f} ms, p99 {ph['p99_ms']:.1f} ms, "
              f"max {ph['max_ms']:.1f} ms ({ph['commits']:,} commits): p99 "
              f"{ph['p99_ratio_to_quiet']:.1f}x quiet")
    print(f"results written to {write_results(args.out, res)}")


if __name__ == "__main__":
    main()
