"""Bad-deploy benchmark: the wide-queues issue's "a bad deploy recovers", on the
embedded default (a broker in this process on local files, local Spark).

    .venv/bin/python bench/bad_deploy_bench.py [--rows 3000000] [--workers 2]
        [--claim-batch 2000] [--probe-cycles 200] [--healthy-first] [--broker-process]
        [--out NAME]

1. A fresh queue with ``max_attempts`` 2 (the queue's other settings as created
   by default: ``max_state_bytes`` 512 MiB) on a fresh file store; a probe
   thread (its own :class:`QueueClient`, over HTTP) runs ``--probe-cycles``
   cycles on it while it is empty: a push of 1 job, a claim of 1, its complete,
   each one small commit, each timed (the "empty" latencies).
2. ``df.write.format("osqueue")`` of ``--rows`` rows (``{"doc": i, "path":
   ...}``, as spark_bench writes them), timed.
3. ``process()`` with a function that always raises (``batch_size``
   ``--claim-batch``, ``retry_in_s`` 0: no retry delay, ``idle_s`` 0), run again
   until every job is dead (at most ``--max-passes`` times), while the probe
   thread cycles on the same queue without a pause (the "during" latencies).
   The probe's jobs have priority 1, so a claim of 1 takes the probe's own job
   unless a worker took it first: the failing function completes probe jobs
   (they are not the deploy's), and a probe that claims a job of the write
   instead fails it (no retry delay; such a job dies one attempt sooner, as it
   would anyway) and counts it in ``probe_foreign_claims``. After the probe
   stops, the probe jobs left pending are claimed and completed.
4. ``redrive`` of all dead jobs, timed; the queue must then hold exactly
   ``--rows`` pending jobs.
5. ``process()`` with a function that succeeds drains them, timed, while the
   probe cycles beside it again (a foreign claim is completed, as the fixed
   workers would): the "drain" latencies, the same small commits beside a
   healthy ``process()`` of the same jobs on the same machine, to tell what the
   failing path costs the probe from what any busy ``process()`` does.
6. The archive is read with ``spark.read.format("osqueue")`` (``table``
   ``archive``; polled until the archiver has written every completed job, at
   most ``--archive-wait-s``): every row of the write must be there exactly once
   (``archived_docs``, ``duplicate_docs``, ``missing_docs``; by the payload's
   ``doc``, and by job id). The redrive-and-drain phase's seconds include this
   read (``archive_read_s``); ``drain_s`` is the ``process()`` run alone.

Measured: the probe's p50/p99 per small commit (push, claim, complete pooled)
empty, during step 3 and during step 5, and the ratios of step 3's p99 to the
empty one (``probe_p99_ratio``, the issue's bar) and to step 5's
(``probe_p99_ratio_to_drain``); refusals ``queue_full`` (the probe's
pushes and claims, the workers' results) and any other probe errors; the
largest queue object written (``max_head_bytes``, a store wrapper sees every
write); bytes written to the store per job in each phase: the write, the failing
passes (the fail-then-dead path: two claims and two fails a job, with their
archive-free commits; the probe's own few writes included), and redrive plus
drain (the complete path: the queue object versions and archive objects);
the broker's process RSS (this process: Spark's driver side too) after each
phase and its peak. Every check's outcome is recorded (``checks``) and a
failed check makes the exit status 1, after the results are written.

``--healthy-first``: before step 3, the same write into a queue of its own
(``healthy-deploy``, the same settings) drained by a ``process()`` that
succeeds, the probe beside it (``probe_healthy``, and the bad deploy's p99
against it: ``probe_p99_ratio_to_healthy``): what any busy ``process()`` of
claims of ``--claim-batch`` costs the probe on this machine, to tell it from
what the failing path adds.

``--broker-process``: the same run with the broker in a process of its own
(this script's ``--serve`` mode: :func:`start_broker` with ``tune_gc``, as
``osqueue-broker`` tunes its process, the same counting store wrapper, its
figures asked for over a pipe at each phase's end), to tell what the
embedded default's one process (the broker's event loop, its I/O threads, the
probe and Spark's driver sharing one GIL) costs the probe. The RSS figures are
then the broker process's.

Prints a summary and writes bench/results/bad_deploy.json. Times in seconds
unless the name ends in ``_ms``; sizes in bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import load, write_results
from bench._measure import CountingStore, peak_rss_bytes, progress, rss_bytes
from broker.errors import OsqueueError
from broker.storage import store_from_url
from osqueue_spark import RESULT_SCHEMA, QueueClient, process, start_broker
from osqueue_spark.session import local_session

QUEUE = "bad-deploy"
HEALTHY_QUEUE = "healthy-deploy"  # --healthy-first's queue
#: the error the failing function raises on every job of the write
ERROR = "bad deploy: the worker function raises on every row"
PROBE_PRIORITY = 1


def always_raises(payload: Any) -> Any:
    """The bad deploy: raises on every job of the write (probe jobs succeed: they are
    not the deploy's, see the module docstring)."""
    if isinstance(payload, dict) and "probe" in payload:
        return None
    raise ValueError(ERROR)


def succeeds(payload: Any) -> Any:
    """The fixed deploy."""
    return None


def pct(values: list[float], q: float) -> float | None:
    """The ``q``-quantile (0..1) of ``values``, nearest rank; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


class Probe:
    """Small commits on the queue from a thread of its own: push 1 job (priority
    :data:`PROBE_PRIORITY`), claim 1, complete it (or fail a job of the write it
    claimed instead: or, with ``complete_foreign``, complete it, as the fixed
    deploy's workers would), each timed. Errors are counted by code, never
    raised."""

    def __init__(self, url: str, complete_foreign: bool = False, queue: str = QUEUE) -> None:
        self.client = QueueClient(url, queue)
        self.complete_foreign = complete_foreign
        self.samples: list[float] = []  # seconds, one per commit
        self.cycles = 0
        self.foreign = 0  # claims that got a job of the write
        self.empty_claims = 0  # claims that got nothing (a worker took the probe's job)
        self.errors: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._n = 0

    def _timed(self, fn: Any) -> Any:
        start = time.perf_counter()
        out = fn()
        self.samples.append(time.perf_counter() - start)
        return out

    def cycle(self) -> None:
        self._n += 1
        try:
            self._timed(lambda: self.client.push({"probe": self._n}, priority=PROBE_PRIORITY))
            jobs = self._timed(lambda: self.client.claim("probe", 1, lease_s=60.0))
            if not jobs:
                self.empty_claims += 1
            elif isinstance(jobs[0].payload, dict) and "probe" in jobs[0].payload:
                self._timed(lambda: self.client.complete(jobs[0].token))
            else:
                self.foreign += 1
                if self.complete_foreign:
                    self._timed(lambda: self.client.complete(jobs[0].token))
                else:
                    self._timed(lambda: self.client.fail(jobs[0].token, "probe: not its job", 0.0))
        except OsqueueError as exc:
            self.errors[exc.code] = self.errors.get(exc.code, 0) + 1
        self.cycles += 1

    def run(self, cycles: int) -> None:
        for _ in range(cycles):
            self.cycle()

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self.cycle()

        self._thread = threading.Thread(target=loop, name="probe", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.client.close()

    def figures(self) -> dict[str, Any]:
        p50, p99 = pct(self.samples, 0.5), pct(self.samples, 0.99)
        return {"cycles": self.cycles, "commits": len(self.samples),
                "p50_ms": p50 * 1e3 if p50 is not None else None,
                "p99_ms": p99 * 1e3 if p99 is not None else None,
                "max_ms": max(self.samples) * 1e3 if self.samples else None,
                "foreign_claims": self.foreign, "empty_claims": self.empty_claims,
                "errors": dict(self.errors)}


def run_workers(spark: Any, fn: Any, url: str, args: argparse.Namespace,
                retry_in_s: float | None, queue: str = QUEUE) -> dict[str, int]:
    """One ``process()`` run of ``args.workers`` tasks until ``queue`` has nothing to
    claim; how many results of each status."""
    worker = process(fn, broker=url, queue=queue, batch_size=args.claim_batch, idle_s=0.0,
                     lease_s=300.0, retry_in_s=retry_in_s)
    rows = (spark.range(args.workers, numPartitions=args.workers)
            .mapInPandas(worker, RESULT_SCHEMA).groupBy("status").count().collect())
    return {r["status"]: int(r["count"]) for r in rows}


def clear_probe_jobs(client: QueueClient) -> int:
    """Claim and complete the probe jobs left pending (no job of the write is pending
    once every one is dead); how many. Raises if a job of the write is claimed."""
    done = 0
    while jobs := client.claim("probe-clear", 1000, lease_s=60.0):
        if any(not (isinstance(j.payload, dict) and "probe" in j.payload) for j in jobs):
            raise RuntimeError("a job of the write was pending once all should be dead")
        client.complete_many([(j.token, None) for j in jobs])
        done += len(jobs)
    return done


def healthy_baseline(spark: Any, df: Any, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """``--healthy-first``: the write into queue :data:`HEALTHY_QUEUE` (the same
    settings), then a ``process()`` that succeeds draining it with the probe
    beside it on that queue: the probe's figures beside a healthy run of the
    same claims, and the drain's seconds. Raises if the drain leaves a job."""
    client = QueueClient(url, HEALTHY_QUEUE)
    client.create(max_attempts=2)
    progress(f"healthy baseline: writing {args.rows:,} rows into {HEALTHY_QUEUE!r}")
    df.write.format("osqueue").option("broker", url).option("queue", HEALTHY_QUEUE) \
        .mode("append").save()
    statuses, seconds, figures = drain_probed(spark, url, args, "healthy baseline",
                                              HEALTHY_QUEUE)
    clear_probe_jobs(client)
    counts = client.stats()["counts"]
    client.close()
    if counts.get("pending", 0) or counts.get("claimed", 0):
        raise RuntimeError(f"the healthy drain left jobs: {counts}")
    return {"probe_healthy": figures, "healthy_drain_s": seconds,
            "healthy_drain_statuses": statuses}


def drain_probed(spark: Any, url: str, args: argparse.Namespace, what: str,
                 queue: str = QUEUE) -> tuple[dict[str, int], float, dict[str, Any]]:
    """A ``process()`` that succeeds draining ``queue``, the probe cycling beside
    it (completing a job of the queue it claims): the results by status, the
    seconds, the probe's figures. Its progress lines start with ``what`` (the
    windows of bench/bad_deploy_profile.py match them)."""
    progress(f"{what}: process() draining, the probe beside it")
    probe = Probe(url, complete_foreign=True, queue=queue)
    probe.start()
    start = time.perf_counter()
    try:
        statuses = run_workers(spark, succeeds, url, args, None, queue=queue)
    finally:
        probe.stop()
    seconds = time.perf_counter() - start
    progress(f"{what}: drained in {seconds:.1f} s")
    return statuses, seconds, probe.figures()


def read_archive(spark: Any, store_url: str, rows: int, wait_s: float) -> dict[str, Any]:
    """The archive's rows of the write: how many, distinct docs and ids, duplicates,
    missing. Polls (every 2 s, at most ``wait_s``) until every doc is there or the
    count stops short at the deadline."""
    from pyspark.sql import functions as F

    deadline = time.monotonic() + wait_s
    while True:
        df = (spark.read.format("osqueue").option("store", store_url).option("queue", QUEUE)
              .option("table", "archive").load()
              .select("id", F.get_json_object("payload", "$.doc").alias("doc")))
        got = df.where(F.col("doc").isNotNull()).agg(
            F.count("*").alias("n"), F.countDistinct("doc").alias("docs"),
            F.countDistinct("id").alias("ids")).collect()[0]
        n, docs, ids = int(got["n"]), int(got["docs"]), int(got["ids"])
        if docs >= rows or time.monotonic() > deadline:
            return {"archived_rows": n, "archived_docs": docs, "archived_ids": ids,
                    "duplicate_docs": n - docs, "duplicate_ids": n - ids,
                    "missing_docs": rows - docs}
        time.sleep(2.0)  # polling the archiver, which writes in the background


class Counters:
    """The broker's store figures and RSS: of this process's counting store
    (the embedded default), or asked of a ``--serve`` child over its pipes."""

    def __init__(self, store: CountingStore | None, child: subprocess.Popen[str] | None) -> None:
        self.store, self.child = store, child

    def read(self) -> dict[str, int]:
        if self.child is None:
            assert self.store is not None
            return {"written": self.store.written, "max_head_bytes": self.store.max_head_bytes,
                    "rss_bytes": rss_bytes(), "peak_rss_bytes": peak_rss_bytes()}
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write("figures\n")
        self.child.stdin.flush()
        got: dict[str, int] = json.loads(self.child.stdout.readline())
        return got


def serve(store_url: str) -> None:
    """``--serve``: a broker in this process over a counting store; prints its URL
    as a JSON line, then answers each ``figures`` line on stdin with one of its
    figures, until stdin closes."""
    store = CountingStore(store_from_url(store_url), QUEUE)
    with start_broker(store, tune_gc=True) as broker:
        print(json.dumps({"url": broker.url}), flush=True)
        for line in sys.stdin:
            if line.strip() != "figures":
                break
            print(json.dumps({"written": store.written,
                              "max_head_bytes": store.max_head_bytes,
                              "rss_bytes": rss_bytes(), "peak_rss_bytes": peak_rss_bytes()}),
                  flush=True)


@contextlib.contextmanager
def broker_for(store_url: str, own_process: bool) -> Iterator[tuple[str, Counters]]:
    """The broker's URL and its figures: embedded in this process, or in a child."""
    if not own_process:
        store = CountingStore(store_from_url(store_url), QUEUE)
        with start_broker(store) as broker:
            yield broker.url, Counters(store, None)
        return
    child = subprocess.Popen([sys.executable, __file__, "--serve", store_url],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line:
            raise RuntimeError(f"the broker process ended (status {child.wait()})")
        yield json.loads(line)["url"], Counters(None, child)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=60)


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
        return
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rows", type=int, default=3_000_000, help="rows of the df.write")
    p.add_argument("--workers", type=int, default=2, help="process() tasks (local cores)")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the write")
    p.add_argument("--claim-batch", type=int, default=2_000, help="process()'s batch_size")
    p.add_argument("--probe-cycles", type=int, default=200,
                   help="probe cycles on the empty queue (the baseline)")
    p.add_argument("--max-passes", type=int, default=5,
                   help="failing process() runs at most, until every job is dead")
    p.add_argument("--archive-wait-s", type=float, default=600.0,
                   help="how long to wait for the archiver to write every completed job")
    p.add_argument("--broker-process", action="store_true",
                   help="the broker in a process of its own (not the embedded default)")
    p.add_argument("--healthy-first", action="store_true",
                   help="first the same write and a healthy process() draining it, the probe "
                        "beside it, on a queue of its own (the probe's healthy baseline)")
    p.add_argument("--out", default="bad_deploy", help="results name under bench/results")
    args = p.parse_args()
    if args.rows < 1 or args.workers < 1 or args.probe_cycles < 1:
        p.error("--rows, --workers and --probe-cycles must be at least 1")

    from pyspark.sql import functions as F

    spark = local_session("osqueue-bad-deploy", cores=args.workers)
    tmp = Path(tempfile.mkdtemp(prefix="osq-bad-deploy-"))
    store_url = f"file://{tmp / 'store'}"
    res: dict[str, Any] = {"rows": args.rows, "workers": args.workers,
                           "claim_batch": args.claim_batch, "max_attempts": 2,
                           "retry_in_s": 0.0, "store": "file", "error_text": ERROR,
                           "broker": "process" if args.broker_process else "embedded"}
    checks: dict[str, bool] = {}
    phases: dict[str, dict[str, Any]] = {}

    def phase(name: str, start: float, written0: int, jobs: int, **more: Any) -> None:
        figures = counters.read()
        written = figures["written"] - written0
        phases[name] = {"seconds": time.perf_counter() - start, "bytes_written": written,
                        "written_per_job": written / jobs, "rss_bytes": figures["rss_bytes"],
                        "peak_rss_bytes": figures["peak_rss_bytes"], "load": load()[0],
                        # (the largest head up to this phase's end: which phase made it)
                        "max_head_bytes_so_far": figures["max_head_bytes"], **more}
        progress(f"{name}: {phases[name]['seconds']:.1f} s, "
                 f"{written / jobs:,.0f} B written per job")

    with broker_for(store_url, args.broker_process) as (url, counters):
        client = QueueClient(url, QUEUE)
        client.create(max_attempts=2)
        probe = Probe(url)
        probe.run(args.probe_cycles)
        res["probe_empty"] = probe.figures()
        clear_probe_jobs(client)

        df = (spark.range(args.rows, numPartitions=args.partitions)
              .select(F.to_json(F.struct(
                  F.col("id").alias("doc"),
                  F.concat(F.lit("s3://bucket/docs/"), F.col("id"), F.lit(".json"))
                  .alias("path"))).alias("payload")))
        if args.healthy_first:
            res.update(healthy_baseline(spark, df, url, args))
        progress(f"writing {args.rows:,} rows")
        start, written0 = time.perf_counter(), counters.read()["written"]
        try:
            (df.write.format("osqueue").option("broker", url).option("queue", QUEUE)
             .mode("append").save())
            res["write_refused"] = None
        except Exception as exc:  # the figure says what refused it
            res["write_refused"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        phase("write", start, written0, args.rows)
        checks["write_accepted"] = res["write_refused"] is None
        checks["pending_after_write"] = client.stats()["counts"]["pending"] == args.rows

        progress("the bad deploy: process() raising on every job, until all are dead")
        probe = Probe(url)
        probe.start()
        start, written0 = time.perf_counter(), counters.read()["written"]
        passes: list[dict[str, int]] = []
        worker_errors: list[str] = []
        try:
            for _ in range(args.max_passes):
                passes.append(run_workers(spark, always_raises, url, args, 0.0))
                progress(f"failing pass {len(passes)}: {passes[-1]}")
                if client.stats()["counts"].get("dead", 0) >= args.rows:
                    break
        except Exception as exc:  # a refused claim or fail fails its task
            worker_errors.append(f"{type(exc).__name__}: {str(exc)[:300]}")
        finally:
            probe.stop()
        res["probe_during"] = probe.figures()
        res["probe_jobs_cleared"] = clear_probe_jobs(client)
        counts = client.stats()["counts"]
        phase("fail_until_dead", start, written0, args.rows, passes=passes,
              worker_errors=worker_errors, counts=counts)
        checks["all_dead"] = counts.get("dead", 0) == args.rows
        empty_p99, during_p99 = res["probe_empty"]["p99_ms"], res["probe_during"]["p99_ms"]
        res["probe_p99_ratio"] = during_p99 / empty_p99 if empty_p99 and during_p99 else None
        res["queue_full_refusals"] = (res["probe_during"]["errors"].get("queue_full", 0)
                                      + sum("queue_full" in e for e in worker_errors)
                                      + ("queue_full" in (res["write_refused"] or "")))

        progress("redrive of all dead")
        start, written0 = time.perf_counter(), counters.read()["written"]
        redriven = client.redrive()
        res["redrive_s"] = time.perf_counter() - start
        res["redriven"] = redriven
        res["pending_after_redrive"] = client.stats()["counts"]["pending"]
        checks["redrive_all"] = redriven == args.rows
        checks["pending_after_redrive"] = res["pending_after_redrive"] == args.rows

        res["drain_statuses"], res["drain_s"], res["probe_drain"] = drain_probed(
            spark, url, args, "the fixed deploy")
        res["probe_jobs_cleared_after_drain"] = clear_probe_jobs(client)
        healthy_p99 = res.get("probe_healthy", {}).get("p99_ms")
        res["probe_p99_ratio_to_healthy"] = during_p99 / healthy_p99 \
            if healthy_p99 and during_p99 else None
        drain_p99 = res["probe_drain"]["p99_ms"]
        res["probe_p99_ratio_to_drain"] = during_p99 / drain_p99 \
            if drain_p99 and during_p99 else None
        res["drain_jobs_per_s"] = args.rows / res["drain_s"]
        counts = client.stats()["counts"]
        checks["drained"] = not any(counts.get(s, 0) for s in ("pending", "claimed", "dead"))
        read_start = time.perf_counter()  # the read waits for the archiver's last objects
        res.update(read_archive(spark, store_url, args.rows, args.archive_wait_s))
        res["archive_read_s"] = time.perf_counter() - read_start
        phase("redrive_and_drain", start, written0, args.rows, counts=counts)
        checks["archived_exactly_once"] = (res["archived_docs"] == args.rows
                                           and res["duplicate_docs"] == 0
                                           and res["duplicate_ids"] == 0)
        client.close()
        last = counters.read()
    res["max_head_bytes"] = last["max_head_bytes"]
    res["phases"] = phases
    res["written_per_settled_job"] = {
        "fail_then_dead": phases["fail_until_dead"]["written_per_job"],
        "complete": phases["redrive_and_drain"]["written_per_job"]}
    res["peak_rss_bytes"] = last["peak_rss_bytes"]
    res["checks"] = checks
    spark.stop()
    summary(res)
    path = write_results(args.out, res)
    print(f"results written to {path}")
    if not all(checks.values()):
        sys.exit(1)


def summary(res: dict[str, Any]) -> None:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} ms"

    e, d = res["probe_empty"], res["probe_during"]
    print(f"rows {res['rows']:,}, max_attempts 2, no retry delay, {res['workers']} workers, "
          f"claims of {res['claim_batch']:,}")
    print(f"probe small commit p50/p99: empty {ms(e['p50_ms'])} / {ms(e['p99_ms'])}, during "
          f"{ms(d['p50_ms'])} / {ms(d['p99_ms'])} ({d['commits']:,} commits): p99 ratio "
          + ("-" if res["probe_p99_ratio"] is None else f"{res['probe_p99_ratio']:.1f}"))
    if "probe_healthy" in res:
        g = res["probe_healthy"]
        print(f"probe beside a healthy process() of a fresh write: {ms(g['p50_ms'])} / "
              f"{ms(g['p99_ms'])} ({g['commits']:,} commits): the bad deploy's p99 against it "
              + ("-" if res["probe_p99_ratio_to_healthy"] is None
                 else f"{res['probe_p99_ratio_to_healthy']:.1f}"))
    h = res["probe_drain"]
    print(f"probe beside the healthy drain: {ms(h['p50_ms'])} / {ms(h['p99_ms'])} "
          f"({h['commits']:,} commits): the bad deploy's p99 against it "
          + ("-" if res["probe_p99_ratio_to_drain"] is None
             else f"{res['probe_p99_ratio_to_drain']:.1f}"))
    print(f"refused as queue full: {res['queue_full_refusals']}; probe errors {d['errors']}; "
          f"largest head {res['max_head_bytes'] / 1e6:,.2f} MB")
    print(f"redrive {res['redriven']:,} in {res['redrive_s']:.2f} s; pending then "
          f"{res['pending_after_redrive']:,}; drain {res['drain_s']:.1f} s "
          f"({res['drain_jobs_per_s']:,.0f} jobs/s)")
    print(f"archived docs {res['archived_docs']:,}, duplicates {res['duplicate_docs']}, "
          f"missing {res['missing_docs']}")
    for name, ph in res["phases"].items():
        print(f"  {name}: {ph['seconds']:.1f} s, {ph['written_per_job']:,.0f} B written per "
              f"job, RSS {ph['rss_bytes'] / 1e6:,.0f} MB (peak {ph['peak_rss_bytes'] / 1e6:,.0f})")
    print("checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}"
                                 for k, v in res["checks"].items()))


if __name__ == "__main__":
    main()
