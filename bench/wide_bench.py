"""Wide benchmark: what a small commit costs when many jobs are in flight or dead (issue
30's table: today every touched job is a line of the head, so it should grow with them).

    .venv/bin/python bench/wide_bench.py [--sizes 1k,100k,300k]
        [--scenarios pending,held,dead] [--rounds 11] [--quick]

For each size N and each scenario, a fresh queue on the local-file store in a fresh
process (``--one SCENARIO N``: the script re-invokes itself, so the memory figures are
that queue's alone) runs an in-process :class:`broker.service.broker.Broker`
(self-test off, GC tuned as in a broker's own process). The queue is filled with N jobs
by bulk pushes of 100,000 (so from 10,000 on, in segment objects: as users get them),
its ``max_state_bytes`` raised to 1 TiB so that nothing is refused, and then:

* ``pending``: left as it is (N jobs pending, the deep-queue case: flat already);
* ``held``: claimed in claims of ``--claim-batch`` (2,000) jobs with a lease of an
  hour, none completed (a cluster holding N jobs: 250 tasks of 2,000 hold 500,000);
* ``dead``: claimed in claims of 2,000 and each job failed once, the queue's
  ``max_attempts`` being 1, so every job is dead (a bad deploy, after it).

The processes are set up one after the other and stay up; the small commits then run
in interleaved rounds across all of them (the order turning each round), so that rows
are compared within rounds. A round is one small commit of each kind, each timed on its
own: a push of 1 job, a claim of 1 job (in ``held`` and ``dead`` the job just pushed,
the only one pending), its complete; between rounds, untimed, the broker finishes the
round's archive write, so every round sees the same queue. Measured:

* ``commit_ms``: the median of the round's three commits over all rounds
  (``push_ms``, ``claim_ms``, ``complete_ms``: the medians of each kind; ``*_ms_each``
  every sample). ``commit_vs_first``: the median over the rounds of this row's round
  (the sum of its three commits) over the same scenario's at the smallest size;
  ``commit_vs_pending``: the same over the pending row of the same size.
* ``head_bytes``: bytes of the last version of the queue object written once set up
  (the head: the jobs of bulk pushes not yet claimed are in segment objects);
  ``bytes_per_commit``: what the rounds wrote to the store (their untimed archive
  object and the commit dropping the archived job included), per timed commit.
* RSS of the process (the broker's: the driver holds at most one push of payloads):
  ``rss_after_setup_bytes`` (VmRSS), ``trimmed_rss_after_setup_bytes`` (VmRSS after
  glibc's ``malloc_trim(0)``), ``rss_end_bytes`` after the rounds, and the peak
  (``ru_maxrss``) at the end, ``peak_rss_end_bytes``.
* ``setup_s``: seconds to fill and to claim (and fail) the jobs.

Prints a table and writes bench/results/wide_bench.json (``--quick``: sizes 1k and
10k, 5 rounds, into wide_bench_quick.json). Sizes in the JSON are in bytes, times in
the unit their name ends with; the table shows MB (10^6 bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ChildProcess, load, write_results
from bench.depth_bench import (
    QUEUE,
    CountingStore,
    fill,
    label,
    parse_count,
    peak_rss_bytes,
    progress,
    rss_bytes,
    say,
    settle_archive,
    trimmed_rss_bytes,
)
from broker.gcpause import tune_for_broker_process
from broker.model.ops import CompleteItems, FailItem
from broker.service.broker import Broker
from broker.service.config import BrokerConfig
from broker.storage import store_from_url

SCENARIOS = ("pending", "held", "dead")
DEFAULT_SIZES = "1k,100k,300k"
QUICK_SIZES = "1k,10k"
#: the lease of the held jobs and of the rounds' claims: none runs out during a run
LEASE_S = 3600.0
#: the error text every failed job of the dead scenario carries
ERROR = "ValueError: bench: the worker function raised on this row"
READY_PREFIX, ROUND_PREFIX, RESULT_PREFIX = "READY ", "ROUND ", "RESULT "

NOTES = {
    "commit_ms": "median ms of one small commit: a push of 1 job, a claim of 1, its "
    "complete, each timed, over every round",
    "commit_vs_first": "median over rounds of the round's commits over the same "
    "scenario's at the smallest size, in the same round",
    "commit_vs_pending": "the same, over the pending scenario's at the same size",
    "head_bytes": "bytes of the queue object's last version once set up",
    "rss_*_bytes": "VmRSS (/proc/self/status) of the broker's process at that moment",
    "peak_rss_end_bytes": "ru_maxrss (getrusage) of the broker's process at the end",
    "setup_s": "seconds to fill the queue and claim (and fail) its jobs",
}


async def claim_all(broker: Broker, batch: int, fail: bool, tag: str) -> int:
    """Claim every pending job in claims of ``batch`` (lease :data:`LEASE_S`); with
    ``fail``, fail each claim's jobs at once (no retry). How many were claimed."""
    done = 0
    last = time.perf_counter()
    while True:
        jobs = await broker.claim(QUEUE, "bench-worker", batch, lease_s=LEASE_S)
        if not jobs:
            return done
        if fail:
            answers = await broker.fail(QUEUE, [FailItem(j.token, ERROR, 0) for j in jobs])
            if not all(a.ok for a in answers):
                raise RuntimeError(f"a fail answered {answers[0]!r}")
        done += len(jobs)
        if time.perf_counter() - last > 10:
            last = time.perf_counter()
            progress(f"{tag}: {'failed' if fail else 'claimed'} {done:,} jobs")


async def one_round(broker: Broker) -> list[float]:
    """Push 1 job, claim 1, complete it; the seconds of each commit."""
    t0 = time.perf_counter()
    await broker.push(QUEUE, [b'{"probe":1}'])
    t1 = time.perf_counter()
    jobs = await broker.claim(QUEUE, "bench-probe", 1, lease_s=LEASE_S)
    t2 = time.perf_counter()
    if len(jobs) != 1:
        raise RuntimeError(f"claim of 1 job answered {len(jobs)}")
    answers = await broker.complete(QUEUE, CompleteItems([jobs[0].token], [None]))
    t3 = time.perf_counter()
    if not answers[0].ok:
        raise RuntimeError(f"complete answered {answers[0]!r}")
    return [t1 - t0, t2 - t1, t3 - t2]


async def serve(scenario: str, url: str, size: int, args: argparse.Namespace) -> None:
    """The child of one (scenario, size): set up a fresh queue and say ``READY {row}``;
    then, per line on stdin, ``round``: one round (``ROUND [push_s, claim_s,
    complete_s]``); ``finish``: the figures (``RESULT {row}``), and exit."""
    tag = f"{scenario} {label(size)}"
    store = CountingStore(store_from_url(url))
    broker = Broker(store, BrokerConfig(self_test=False))
    await broker.start()
    row: dict[str, Any] = {"scenario": scenario, "size": size, "label": label(size)}
    try:
        settings: dict[str, Any] = {"max_state_bytes": 1 << 40}
        if scenario == "dead":
            settings["max_attempts"] = 1
        await broker.create_queue(QUEUE, settings)
        progress(f"{tag}: setting up")
        start = time.perf_counter()
        await fill(broker, size, args.fill_chunk, tag)
        if scenario != "pending":
            row["claimed"] = await claim_all(broker, args.claim_batch, scenario == "dead", tag)
        await settle_archive(broker)
        row["setup_s"] = time.perf_counter() - start
        row["counts"] = (await broker.stats(QUEUE))["counts"]
        row["head_bytes"] = store.head_bytes
        row["rss_after_setup_bytes"] = rss_bytes()
        row["trimmed_rss_after_setup_bytes"] = trimmed_rss_bytes()
        progress(f"{tag}: set up in {row['setup_s']:.1f} s, head "
                 f"{row['head_bytes'] / 1e6:.2f} MB")
        say(READY_PREFIX, row)
        samples: list[list[float]] = []  # seconds: [push, claim, complete] per round
        written0 = store.written
        while True:
            command = (await asyncio.to_thread(sys.stdin.readline)).strip()
            if command != "round":
                break
            samples.append(await one_round(broker))
            await settle_archive(broker)  # untimed: every round sees the same queue
            say(ROUND_PREFIX, samples[-1])
        if command != "finish":
            return  # the parent went away
        if samples:
            kinds = list(zip(*samples, strict=True))
            row.update(rounds=len(samples),
                       commit_ms=statistics.median(t for s in samples for t in s) * 1e3,
                       push_ms=statistics.median(kinds[0]) * 1e3,
                       claim_ms=statistics.median(kinds[1]) * 1e3,
                       complete_ms=statistics.median(kinds[2]) * 1e3,
                       push_ms_each=[round(t * 1e3, 3) for t in kinds[0]],
                       claim_ms_each=[round(t * 1e3, 3) for t in kinds[1]],
                       complete_ms_each=[round(t * 1e3, 3) for t in kinds[2]],
                       bytes_per_commit=(store.written - written0) / (3 * len(samples)),
                       head_bytes_end=store.head_bytes)
        row["rss_end_bytes"] = rss_bytes()
        row["peak_rss_end_bytes"] = peak_rss_bytes()
        say(RESULT_PREFIX, row)
    finally:
        await broker.stop()
        store.close()


# -- the parent: one child process per (scenario, size) ------------------------------


class Child(ChildProcess):
    """One (scenario, size) in its own process (``--one``) on a temporary directory's
    file store, kept up between commands."""

    def __init__(self, scenario: str, size: int, args: argparse.Namespace,
                 stack: contextlib.ExitStack) -> None:
        self.scenario, self.size = scenario, size
        self.rounds: list[list[float]] = []
        tmp = Path(tempfile.mkdtemp(prefix="wide-bench-"))
        stack.callback(shutil.rmtree, tmp, True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--one", scenario, str(size),
               "--store-url", f"file://{tmp}", "--fill-chunk", str(args.fill_chunk),
               "--claim-batch", str(args.claim_batch)]
        print(f"== {scenario} {label(size)}", file=sys.stderr, flush=True)
        super().__init__(cmd, args, stack)
        self.row = self.answer(READY_PREFIX) or {}

    def round(self) -> None:
        got = self.command("round", ROUND_PREFIX)
        if got is not None:
            self.rounds.append(got)

    def finish(self) -> dict[str, Any]:
        base = {"scenario": self.scenario, "size": self.size, "label": label(self.size)}
        return self.result(base, RESULT_PREFIX)


def commit_rounds(children: list[Child], rounds: int) -> list[float]:
    """``rounds`` interleaved rounds in every child that is up (the order turning each
    round); the machine's 1-minute load after each round."""
    ready = [c for c in children if c.error is None]
    loads = []
    for r in range(rounds):
        turn = r % len(ready) if ready else 0
        for child in ready[turn:] + ready[:turn]:
            child.round()
        loads.append(load()[0])
        ready = [c for c in ready if c.error is None]
    return loads


def ratio(child: Child, other: Child | None) -> float | None:
    """The median over the rounds both have of ``child``'s round over ``other``'s."""
    if other is None or not child.rounds or not other.rounds:
        return None
    n = min(len(child.rounds), len(other.rounds))
    return statistics.median(sum(child.rounds[i]) / sum(other.rounds[i]) for i in range(n))


def compare(children: list[Child], rows: list[dict[str, Any]]) -> None:
    """Set each row's ``commit_vs_first`` and ``commit_vs_pending`` (see the docstring)."""
    for child, row in zip(children, rows, strict=True):
        first = next(c for c in children if c.scenario == child.scenario)
        pending = next((c for c in children
                        if c.scenario == "pending" and c.size == child.size), None)
        row["commit_vs_first"] = ratio(child, first)
        row["commit_vs_pending"] = ratio(child, pending)


def fmt(value: Any, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value / scale, spec)


def print_table(rows: list[dict[str, Any]], batch: int) -> None:
    print(f"{'scenario':<8} {'N':>6} {'commit ms':>10} {'vs first':>8} {'vs pending':>10}"
          f" {'push ms':>8} {'claim ms':>9} {'complete ms':>11} {'head MB':>9}"
          f" {'RSS MB':>8} {'trimmed MB':>10} {'peak MB':>8} {'setup s':>8}")
    for r in rows:
        if r.get("error") or "commit_ms" not in r:
            print(f"{r['scenario']:<8} {r['label']:>6}  {r.get('error', 'no rounds')}")
            continue
        print(f"{r['scenario']:<8} {r['label']:>6} {r['commit_ms']:>10.2f}"
              f" {fmt(r.get('commit_vs_first'), '.2f'):>8}"
              f" {fmt(r.get('commit_vs_pending'), '.2f'):>10} {r['push_ms']:>8.2f}"
              f" {r['claim_ms']:>9.2f} {r['complete_ms']:>11.2f}"
              f" {fmt(r['head_bytes'], ',.2f', 1e6):>9}"
              f" {fmt(r['rss_after_setup_bytes'], ',.0f', 1e6):>8}"
              f" {fmt(r['trimmed_rss_after_setup_bytes'], ',.0f', 1e6):>10}"
              f" {fmt(r['peak_rss_end_bytes'], ',.0f', 1e6):>8} {r['setup_s']:>8.1f}")
    print("commit ms: median of a push of 1 job, a claim of 1 and its complete, each one"
          " commit; vs first: over the same scenario at the smallest N; vs pending: over"
          " pending at the same N")
    print(f"held: N jobs claimed in claims of {batch:,} and held; dead: claimed in claims"
          f" of {batch:,} and failed with max_attempts 1. RSS: VmRSS once set up; trimmed:"
          " the same after malloc_trim(0); peak: ru_maxrss at the end")


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", help=f"comma-separated counts (default {DEFAULT_SIZES})")
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help="pending,held,dead or some of them")
    p.add_argument("--rounds", type=int, help="rounds of small commits (default 11)")
    p.add_argument("--claim-batch", type=int, default=2_000,
                   help="jobs a setup claim takes (held and dead)")
    p.add_argument("--fill-chunk", type=parse_count, default=100_000, help="jobs a fill push holds")
    p.add_argument("--child-timeout-s", type=float, default=3600.0,
                   help="give up on a (scenario, size) that does not answer within this "
                        "(0: never)")
    p.add_argument("--quick", action="store_true", help="sizes 1k and 10k, 5 rounds")
    p.add_argument("--out", help="results name under bench/results (default wide_bench, "
                   "wide_bench_quick with --quick)")
    p.add_argument("--one", nargs=2, metavar=("SCENARIO", "SIZE"), help=argparse.SUPPRESS)
    p.add_argument("--store-url", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.rounds = args.rounds or (5 if args.quick else 11)
    if args.rounds < 1 or not 1 <= args.claim_batch <= 10_000:
        p.error("--rounds must be at least 1 and --claim-batch within 1..10000")

    if args.one:  # the child: one (scenario, size), driven over stdin (see serve())
        tune_for_broker_process()
        scenario, size = args.one[0], int(args.one[1])
        try:
            asyncio.run(serve(scenario, args.store_url, size, args))
        except Exception as exc:  # the row says why; the run goes on with the others
            say(RESULT_PREFIX, {"scenario": scenario, "size": size, "label": label(size),
                                "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
        return

    try:
        sizes = [parse_count(s) for s in (args.sizes or (QUICK_SIZES if args.quick
                                                         else DEFAULT_SIZES)).split(",")]
    except ValueError as exc:
        p.error(str(exc))
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if not scenarios or any(s not in SCENARIOS for s in scenarios):
        p.error(f"--scenarios takes {','.join(SCENARIOS)} or some of them, "
                f"got {args.scenarios[:40]!r}")
    config = {"sizes": sizes, "scenarios": scenarios, "rounds": args.rounds,
              "claim_batch": args.claim_batch, "fill_chunk": args.fill_chunk,
              "store": "file", "quick": args.quick, "error_text": ERROR}
    name = args.out or ("wide_bench_quick" if args.quick else "wide_bench")
    with contextlib.ExitStack() as stack:
        # set up one after the other (each alone on the machine), all kept up
        children = [Child(s, n, args, stack) for s in scenarios for n in sizes]
        progress(f"all set up; {args.rounds} interleaved rounds of small commits")
        loads = commit_rounds(children, args.rounds)
        rows = [child.finish() for child in children]
        compare(children, rows)
    print_table(rows, args.claim_batch)
    path = write_results(name, {"config": config, "notes": NOTES, "load_rounds": loads,
                                "rows": rows})
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
