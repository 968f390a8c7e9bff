"""Depth benchmark: what a small commit costs as a queue gets deep (N jobs pending, in
segment objects) and wide (N jobs claimed and held, or dead: the wide-queues issue).

    .venv/bin/python bench/depth_bench.py [--depths 1k,100k,1M] [--kinds pending,held,dead]
        [--groups 10000] [--stores file,s3] [--rounds 11] [--drain-jobs 1M] [--quick]

For each depth N, each kind and each store (the local-file store, and S3 as a
moto server on 127.0.0.1: ``python -m moto.server`` in a child process, one per
(store, kind, depth)), side by side in one run, a fresh queue in a fresh process
(``--one KIND DEPTH`` with the store's URL: the script re-invokes itself, so the
memory figures are that queue's alone) runs an in-process :class:`broker.service.broker.Broker`
(self-test off, GC tuned as in a broker's own process unless ``--no-tune-gc``).
The queue is filled with N jobs by bulk pushes (from 10,000 on, in segment
objects: as users get them), and then, by kind:

* ``pending``: left as it is (N jobs pending: the deep queue);
* ``held``: claimed in claims of ``--claim-batch`` (2,000) jobs with a lease of an
  hour, none completed (250 tasks of 2,000 hold 500,000; in claim records by default);
* ``dead``: claimed in claims of 2,000 and each claim's jobs failed at once, no retry
  delay, until dead (``--dead-attempts``, ``max_attempts``: 1 by default; a bad
  deploy, after it; ``--spill-jobs``: into spill objects past that many dead);
* ``grouped`` (``--kinds grouped``, ``--groups``): N pending jobs in groups, and its
  columns beside the ungrouped 1k's (``bench/_groups_depth.py``).

The processes are set up one after the other and stay up; the small commits then
run in interleaved rounds across all of them (the order turning each round), so
that rows are compared within rounds; last, the processes drain one after the
other. Measured:

* ``fill_s``: seconds to fill the queue with bulk pushes of ``--fill-chunk``
  payloads (100,000 by default, the most one HTTP request may carry), each one
  commit; ``setup_s``: seconds to claim (and fail) the jobs after it. The
  queue's ``max_state_bytes`` is raised to 1 TiB, the most the model allows, so
  a depth is refused only if the model refuses it: then the row says
  ``refused: queue full`` and measures nothing else. Payloads are
  ``{"doc": i, "path": "s3://bucket/docs/<i>.json"}``.
* ``head_bytes``: bytes of the last version of the queue object written once set
  up (the head object only: the pending jobs of bulk pushes are in segment
  objects); ``max_head_bytes``: the largest version written in the whole run. For
  the file store, ``store_disk_bytes`` adds up every file under the store's
  directory once set up.
* ``commit_ms``: the median time of one small commit, in milliseconds, over
  ``--rounds`` rounds of a push of 1 job, a claim of 1 job (in ``held`` and
  ``dead`` the job just pushed, the only one pending; in ``pending`` the oldest)
  and its complete, each timed on its own (``push_ms``, ``claim_ms`` and
  ``complete_ms`` are the medians of each kind; ``*_ms_each`` every sample).
  Between rounds, untimed, the broker finishes the round's archive write, so
  every round sees the same queue. ``commit_vs_first`` is the median over the
  rounds of this row's round (the sum of its three commits) over the same store
  and kind's at the smallest depth of the run, in the same round.
  ``bytes_per_commit`` is what the rounds wrote to the store, per commit.
* RSS of the process (the broker's: the only other thing in it is this
  driver, which holds at most one chunk of payloads, and in ``held`` the
  tokens of the held jobs): ``rss_*_bytes`` is VmRSS from /proc/self/status at
  that moment (after setting up, after the commit rounds, at the end);
  ``peak_rss_*_bytes`` is ``ru_maxrss`` of ``resource.getrusage`` (the peak so
  far) at the same moments; ``trimmed_rss_after_fill_bytes`` is VmRSS after
  setting up once glibc's ``malloc_trim(0)`` gave freed heap back (what the
  process holds, not what the allocator kept after the pushes' bursts).
* Bytes written to the store per settled job (``written_per_settled_job``,
  ``settle_path`` says which path): a store wrapper sums the sizes of
  ``write_if_match``, ``create_if_absent`` and ``put`` calls (queue object
  versions, segment and archive objects).

  - ``pending``, the complete path: while the broker drains ``--drain-jobs``
    jobs (capped at what is pending) in claims of ``--drain-batch`` (2,000),
    each followed by the complete of all of them, up to the landing of the
    last complete's archive object (``written_per_drained_job``): the commit
    pattern of ``process()``, driven in-process without Spark.
  - ``held``, the complete path of N jobs in flight: what the setup's claims
    wrote per job (``written_per_claimed_job``) plus what completing up to
    ``--drain-jobs`` of the held jobs, ``--drain-batch`` a commit, wrote per job
    (``written_per_drained_job``).
  - ``dead``, the fail-then-dead path: what the setup's claims and fails wrote
    per job (``written_per_dead_job``).

Steps past ``--step-budget-s`` (900 s; rounds after at least 3, drains: their rows
say how many jobs they drained) stop early; a process that does not answer (setup,
round, drain) within ``--child-timeout-s`` is recorded as timed out.

Prints a table and writes bench/results/depth_bench.json (``--quick``: depths
1k and 10k, 5 rounds, into depth_bench_quick.json). Sizes in the JSON are in
bytes, times in the unit their name ends with; the table shows MB (10^6 bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from bench import _groups_depth as grouped
from bench._common import ChildProcess, load, moto_env, moto_s3, write_results
from bench._measure import CountingStore, peak_rss_bytes, progress, rss_bytes, trimmed_rss_bytes
from broker.errors import QueueFull
from broker.gcpause import tune_for_broker_process
from broker.model.ops import CompleteItems, FailItem, NewJob
from broker.service.broker import Broker
from broker.service.config import BrokerConfig
from broker.storage import store_from_url

QUEUE = "depth"
STORES = ("file", "s3")
KINDS = ("pending", "held", "dead", "grouped")
DEFAULT_KINDS = KINDS[:3]
DEFAULT_DEPTHS = "1k,100k,1M"
QUICK_DEPTHS = "1k,10k"
MIN_ROUNDS, _SUFFIXES = 3, {"k": 1_000, "m": 1_000_000}
#: the lease of the held jobs and of every claim of the run: none runs out during it
LEASE_S = 3600.0
#: the error text every failed job of the dead kind carries
ERROR = "ValueError: bench: the worker function raised on this row"
#: the child's lines on stdout (see serve())
FILLED_PREFIX, ROUND_PREFIX, RESULT_PREFIX = "FILLED ", "ROUND ", "RESULT "

#: What the main figures of a row mean, saved with them (the module docstring has more).
NOTES = {
    "commit_ms": "median ms of one small commit: a push of 1 job, a claim of 1, its "
    "complete, each timed, over every round",
    "commit_vs_first": "median over rounds of the round's commits over the same store and "
    "kind's at the smallest depth, in the same round",
    "head_bytes": "bytes of the queue object's last version once set up",
    "max_head_bytes": "bytes of the largest version of the queue object written in the run",
    "rss_*_bytes": "VmRSS (/proc/self/status) of the broker's process at that moment",
    "peak_rss_*_bytes": "ru_maxrss (getrusage) of the broker's process: the peak so far",
    "trimmed_rss_after_fill_bytes": "VmRSS once set up and after glibc's malloc_trim(0)",
    "written_per_drained_job": "bytes written to the store per job while draining in "
    "claims of drain_batch jobs, each then completed (pending: the commit pattern of "
    "process() driven in-process, without Spark), or completing the held jobs, "
    "drain_batch a commit (held)",
    "written_per_claimed_job": "held: bytes written per job by the setup's claims",
    "written_per_dead_job": "dead: bytes written per job by the setup's claims and fails",
    "written_per_settled_job": "bytes written per settled job on settle_path: pending, the "
    "drain; held, claimed + drained; dead, claimed and failed until dead",
    "fill_s": "seconds to fill the queue with bulk pushes of fill_chunk jobs",
    "setup_s": "seconds to claim (and fail) the jobs once filled",
    **grouped.NOTES,
}


def parse_count(text: str) -> int:
    """``1000``, ``1k``, ``100k``, ``1M``, ``10M`` (case-insensitive) as a count;
    ``ValueError`` (quoting a short prefix) for anything else or below 1."""
    t = text.strip().lower().replace("_", "").replace(",", "")
    scale = _SUFFIXES.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in _SUFFIXES else t
    if not digits.isdigit() or int(digits) * scale < 1:
        raise ValueError(f"not a count: {text[:20]!r} (use e.g. 1000, 1k, 100k, 1M)")
    return int(digits) * scale


def label(n: int) -> str:
    """A depth as the issue writes it: 1k, 100k, 1M, 10M (or the plain number)."""
    for unit, scale in (("M", 1_000_000), ("k", 1_000)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def payloads(start: int, stop: int) -> list[bytes]:
    return [orjson.dumps({"doc": i, "path": f"s3://bucket/docs/{i}.json"})
            for i in range(start, stop)]


async def fill(broker: Broker, depth: int, chunk: int, tag: str) -> float:
    """Push ``depth`` jobs in bulk pushes of ``chunk``; seconds taken. Raises
    ``QueueFull`` as the broker does."""
    start = last = time.perf_counter()
    done = 0
    while done < depth:
        n = min(chunk, depth - done)
        await broker.push(QUEUE, payloads(done, done + n))
        done += n
        if time.perf_counter() - last > 10 and done < depth:
            last = time.perf_counter()
            progress(f"{tag}: filled {done:,} of {depth:,} jobs in {last - start:.0f} s")
    return time.perf_counter() - start


async def claim_all(broker: Broker, batch: int, fail: bool,
                    tag: str) -> list[str]:
    """Claim every pending job in claims of ``batch`` (lease :data:`LEASE_S`); with
    ``fail``, fail each claim's jobs at once, with no retry delay, until every job is
    dead (nothing is then held). The tokens of the jobs held at the end."""
    held: list[str] = []
    done = 0
    last = time.perf_counter()
    while True:
        jobs = await broker.claim(QUEUE, "bench-worker", batch, lease_s=LEASE_S)
        if not jobs:
            return held
        if fail:
            answers = await broker.fail(QUEUE, [FailItem(j.token, ERROR, 0) for j in jobs])
            if not all(a.ok for a in answers):
                raise RuntimeError(f"a fail answered {answers[0]!r}")
        else:
            held.extend(j.token for j in jobs)
        done += len(jobs)
        if time.perf_counter() - last > 10:
            last = time.perf_counter()
            progress(f"{tag}: {'claimed and failed' if fail else 'claimed'} {done:,} jobs")


async def one_round(broker: Broker, probe: NewJob | bytes = b'{"probe":1}') -> list[float]:
    """Push 1 job (``probe``), claim 1, complete it; the seconds of each commit."""
    t0 = time.perf_counter()
    await broker.push(QUEUE, [probe])
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


async def settle_archive(broker: Broker) -> None:
    q = broker.served(QUEUE)
    if q is not None:
        await q.archiver.wait(3600.0)


async def drain(broker: Broker, store: CountingStore, target: int, batch: int,
                budget_s: float, tag: str, held: list[str]) -> dict[str, Any]:
    """Complete ``target`` jobs, ``batch`` a commit: claimed in claims of ``batch``
    (``held`` empty), or the held jobs of ``held`` (their tokens), until ``target`` are
    done, there are none left or ``budget_s`` passed; bytes written per drained job."""
    written0 = store.written
    start = last = time.perf_counter()
    drained = 0
    stopped = "done"
    while drained < target:
        n = min(batch, target - drained)
        if held:
            tokens, held[:n] = held[:n], []
        else:
            tokens = [j.token for j in await broker.claim(QUEUE, "bench", n, lease_s=LEASE_S)]
        if not tokens:
            stopped = "queue empty"
            break
        answers = await broker.complete(QUEUE, CompleteItems(tokens, [None] * len(tokens)))
        if not all(a.ok for a in answers):
            raise RuntimeError(f"a complete answered {answers[0]!r}")
        drained += len(tokens)
        now = time.perf_counter()
        if budget_s and now - start > budget_s and drained < target:
            stopped = f"step budget ({budget_s:g} s)"
            break
        if now - last > 10 and drained < target:
            last = now
            progress(f"{tag}: drained {drained:,} of {target:,} jobs in {now - start:.0f} s")
    await settle_archive(broker)
    elapsed = time.perf_counter() - start
    written = store.written - written0
    return {"drain_target": target, "drained": drained, "drain_stopped": stopped,
            "drain_s": elapsed, "drain_jobs_per_s": drained / elapsed if elapsed else None,
            "drain_bytes_written": written,
            "written_per_drained_job": written / drained if drained else None}


def disk_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def say(prefix: str, value: Any) -> None:
    """One line of the child's protocol on stdout (see :func:`serve`)."""
    print(prefix + json.dumps(value), flush=True)


async def set_up(broker: Broker, store: CountingStore, row: dict[str, Any], kind: str,
                 url: str, args: argparse.Namespace, tag: str) -> list[str]:
    """Fill the queue and claim (and fail) its jobs as ``kind`` says, the figures into
    ``row``; the tokens of the held jobs. Raises ``QueueFull`` as the broker does."""
    depth = row["depth"]
    written0 = store.written
    row["fill_s"] = await (grouped.fill_grouped(broker, QUEUE, row, args, payloads, tag)
                           if kind == "grouped" else fill(broker, depth, args.fill_chunk, tag))
    row["fill_bytes_written"] = store.written - written0
    held: list[str] = []
    if kind not in ("pending", "grouped"):
        written0 = store.written
        start = time.perf_counter()
        held = await claim_all(broker, args.claim_batch, kind == "dead", tag)
        await settle_archive(broker)
        row["setup_s"] = time.perf_counter() - start
        per_job = (store.written - written0) / depth
        row["written_per_dead_job" if kind == "dead" else "written_per_claimed_job"] = per_job
        if kind == "dead":
            row.update(written_per_settled_job=per_job, settle_path="fail-then-dead")
    row["counts"], row["head_bytes"] = (await broker.stats(QUEUE))["counts"], store.head_bytes
    row["spill_objects"] = len(store.list(f"{QUEUE}/spills/"))
    if url.startswith("file://"):
        row["store_disk_bytes"] = disk_bytes(Path(url.removeprefix("file://")))
    row["rss_after_fill_bytes"] = rss_bytes()
    row["peak_rss_after_fill_bytes"] = peak_rss_bytes()
    row["trimmed_rss_after_fill_bytes"] = trimmed_rss_bytes()
    return held


async def serve(kind: str, url: str, depth: int, args: argparse.Namespace) -> None:
    """The child of one (store, kind, depth): set up a fresh queue and say ``FILLED
    {row}``; then, per line on stdin, ``round``: one push of 1 job, one claim of 1 and
    its complete, each timed (``ROUND [push_s, claim_s, complete_s]``); ``finish``: the
    commit figures, the drain and the memory figures (``RESULT {row}``), and exit."""
    store_kind = "file" if url.startswith("file://") else "s3"
    tag = f"{store_kind} {kind} {label(depth)}"
    store = CountingStore(store_from_url(url), QUEUE)
    broker = Broker(store, BrokerConfig(self_test=False, grouped_segments=kind == "grouped",
                                        held_in_records=args.held_in_records,
                                        spill_jobs=args.spill_jobs))
    await broker.start()
    row: dict[str, Any] = {"store": store_kind, "kind": kind, "depth": depth,
                           "label": label(depth), "rss_before_fill_bytes": rss_bytes()}
    try:
        settings: dict[str, Any] = {"max_state_bytes": 1 << 40}
        if kind == "dead":
            settings["max_attempts"] = args.dead_attempts
        await broker.create_queue(QUEUE, settings)
        progress(f"{tag}: setting up")
        held: list[str] = []
        try:
            held = await set_up(broker, store, row, kind, url, args, tag)
        except QueueFull as exc:
            row["refused"] = f"refused: queue full ({str(exc)[:120]})"
        else:
            progress(f"{tag}: set up in {row['fill_s'] + row.get('setup_s', 0):.1f} s, "
                     f"head {row['head_bytes'] / 1e6:.2f} MB")
        say(FILLED_PREFIX, row)
        samples: list[list[float]] = []  # seconds: [push, claim, complete] per round
        written0 = store.written
        while True:
            command = (await asyncio.to_thread(sys.stdin.readline)).strip()
            if command == "round" and "refused" not in row:
                samples.append(await one_round(broker, grouped.probe(kind)))
                await settle_archive(broker)  # untimed: every round sees the same queue
                say(ROUND_PREFIX, samples[-1])
                continue
            break
        if command != "finish":
            return  # the parent went away: no drain
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
                       rss_after_commits_bytes=rss_bytes(),
                       peak_rss_after_commits_bytes=peak_rss_bytes())
            progress(f"{tag}: commit {row['commit_ms']:.1f} ms (median of "
                     f"{3 * len(samples)})")
            if kind != "dead":
                progress(f"{tag}: draining")
                target = min(args.drain_jobs, len(held) if kind == "held" else depth)
                row.update(await drain(broker, store, target, args.drain_batch,
                                       args.step_budget_s, tag, held))
                per_job = row["written_per_drained_job"]
                if per_job is not None:
                    row.update(written_per_settled_job=per_job
                               + row.get("written_per_claimed_job", 0.0),
                               settle_path="complete")
                progress(f"{tag}: drained {row['drained']:,} in {row['drain_s']:.1f} s, "
                         + (f"{per_job / 1e3:.1f} KB written per job" if per_job
                            else "nothing"))
        row["max_head_bytes"] = store.max_head_bytes
        row["rss_end_bytes"] = rss_bytes()
        row["peak_rss_end_bytes"] = peak_rss_bytes()
        say(RESULT_PREFIX, row)
    finally:
        await broker.stop()
        store.close()


# -- the parent: one child process per (store, kind, depth) ----------------------------


class Child(ChildProcess):
    """One (store, kind, depth) in its own process (``--one``), kept up between
    commands; its store is a temporary directory, or a moto server of its own."""

    def __init__(self, store: str, kind: str, depth: int, args: argparse.Namespace,
                 stack: contextlib.ExitStack) -> None:
        self.store, self.kind, self.depth = store, kind, depth
        self.rounds: list[list[float]] = []  # seconds: [push, claim, complete] per round
        if store == "file":
            tmp = Path(tempfile.mkdtemp(prefix="depth-bench-"))
            stack.callback(shutil.rmtree, tmp, True)
            url, env = f"file://{tmp}", None
        else:
            bucket = f"depth-bench-{uuid.uuid4().hex[:8]}"
            endpoint = stack.enter_context(moto_s3(bucket))
            # a whole-object PUT of a deep queue takes moto far longer than the default 10 s
            url, env = f"s3://{bucket}/bench?endpoint={endpoint}&timeout_s=900&retries=2", \
                moto_env()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--one", kind, str(depth),
               "--store-url", url, "--drain-jobs", str(args.drain_jobs),
               "--drain-batch", str(args.drain_batch), "--fill-chunk", str(args.fill_chunk),
               "--claim-batch", str(args.claim_batch), "--spill-jobs", str(args.spill_jobs),
               "--dead-attempts", str(args.dead_attempts), "--step-budget-s",
               str(args.step_budget_s), "--groups", str(args.groups)]
        cmd += ["--no-tune-gc"] * (not args.tune_gc)
        cmd += ["--no-held-in-records"] * (not args.held_in_records)
        print(f"== {store} {kind} {label(depth)}", file=sys.stderr, flush=True)
        super().__init__(cmd, args, stack, env)
        self.row = self.answer(FILLED_PREFIX) or {}

    @property
    def base(self) -> dict[str, Any]:
        return {"store": self.store, "kind": self.kind, "depth": self.depth,
                "label": label(self.depth)}

    @property
    def ready(self) -> bool:
        return self.error is None and "head_bytes" in self.row

    def round(self) -> None:
        got = self.command("round", ROUND_PREFIX)
        if got is not None:
            self.rounds.append(got)

    def finish(self) -> dict[str, Any]:
        return self.result(self.base, RESULT_PREFIX)


def commit_rounds(children: list[Child], rounds: int, budget_s: float) -> list[float]:
    """``rounds`` interleaved rounds of small commits in every ready child (the order
    turning each round; past ``budget_s``, after :data:`MIN_ROUNDS`, no more); the
    machine's 1-minute load after each round."""
    ready = [c for c in children if c.ready]
    loads = []
    start = time.perf_counter()
    for r in range(rounds):
        turn = r % len(ready) if ready else 0
        for child in ready[turn:] + ready[:turn]:
            child.round()
        loads.append(load()[0])
        ready = [c for c in ready if c.error is None]
        if budget_s and r + 1 >= MIN_ROUNDS and time.perf_counter() - start > budget_s:
            break
    return loads


def compare(children: list[Child], rows: list[dict[str, Any]]) -> None:
    """Set each row's ``commit_vs_first``: the median over the rounds of its round over
    the same store and kind's at the first depth, in the same round."""
    for child, row in zip(children, rows, strict=True):
        first = next((c for c in children
                      if (c.store, c.kind) == (child.store, child.kind) and c.rounds), None)
        if first is None or not child.rounds:
            continue
        n = min(len(first.rounds), len(child.rounds))
        row["commit_vs_first"] = statistics.median(
            sum(child.rounds[i]) / sum(first.rounds[i]) for i in range(n))


def fmt(value: Any, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value / scale, spec)


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"{'store':<5} {'kind':<7} {'N':>6} {'commit ms':>10} {'vs first':>8}"
          f" {'push ms':>8} {'claim ms':>9} {'complete ms':>11} {'head MB':>9}"
          f" {'max head MB':>11} {'RSS MB':>8} {'peak MB':>8} {'KB/settled job':>14}")
    for r in rows:
        problem = r.get("refused") or r.get("error")
        if problem or "commit_ms" not in r:
            print(f"{r['store']:<5} {r['kind']:<7} {r['label']:>6}  {problem or 'no rounds'}")
            continue
        cut = "*" if r.get("drain_stopped", "done") not in ("done", "queue empty") else " "
        print(f"{r['store']:<5} {r['kind']:<7} {r['label']:>6} {r['commit_ms']:>10.2f}"
              f" {fmt(r.get('commit_vs_first'), '.2f'):>8} {r['push_ms']:>8.2f}"
              f" {r['claim_ms']:>9.2f} {r['complete_ms']:>11.2f}"
              f" {fmt(r['head_bytes'], ',.2f', 1e6):>9}"
              f" {fmt(r['max_head_bytes'], ',.2f', 1e6):>11}"
              f" {fmt(r['rss_after_fill_bytes'], ',.0f', 1e6):>8}"
              f" {fmt(r['peak_rss_end_bytes'], ',.0f', 1e6):>8}"
              f" {fmt(r.get('written_per_settled_job'), ',.1f', 1e3):>13}{cut}")
    print("commit ms: median of a push of 1 job, a claim of 1 and its complete, each one"
          " commit; vs first: over the same store and kind at the smallest N")
    print(f"held: N jobs claimed in claims of {args.claim_batch:,} and held; dead: claimed"
          f" in claims of {args.claim_batch:,} and failed with max_attempts"
          f" {args.dead_attempts}. RSS: VmRSS once set up; peak: ru_maxrss at the end")
    print(f"KB/settled job: bytes written to the store per job: pending, draining in claims"
          f" of {args.drain_batch:,} + completes (the commit pattern of process(), in-process);"
          " held, its claims + completing the held jobs; dead, its claims and fails;"
          " *: the drain stopped at --step-budget-s")
    grouped.print_grouped(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--depths", help=f"comma-separated counts (default {DEFAULT_DEPTHS})")
    p.add_argument("--kinds", default=",".join(DEFAULT_KINDS), help="pending,held,dead,grouped")
    p.add_argument("--stores", default=",".join(STORES), help="file,s3 or one of them")
    p.add_argument("--rounds", type=int, help="rounds of small commits (default 11)")
    p.add_argument("--claim-batch", type=int, default=2_000,
                   help="jobs a setup claim takes (held and dead)")
    p.add_argument("--groups", type=int, default=10_000,
                   help="grouped: the jobs' groups, g0.. (default 10,000)")
    p.add_argument("--dead-attempts", type=int, default=1,
                   help="the dead kind's max_attempts: claims and fails a job takes to die")
    p.add_argument("--drain-jobs", type=parse_count, default=1_000_000,
                   help="jobs drained per row, capped at what is pending or held (default 1M)")
    p.add_argument("--drain-batch", type=int, default=2_000, help="jobs a drain commit takes")
    p.add_argument("--fill-chunk", type=parse_count, default=100_000, help="jobs a fill push holds")
    p.add_argument("--step-budget-s", type=float, default=900.0,
                   help="stop the commit rounds (after 3) and the drain past this (0: never)")
    p.add_argument("--child-timeout-s", type=float, default=4 * 3600.0,
                   help="give up on a (store, kind, depth) that does not answer within this: "
                        "its setup, a round or its drain (0: never)")
    p.add_argument("--quick", action="store_true", help="depths 1k and 10k, 5 rounds")
    p.add_argument("--no-tune-gc", dest="tune_gc", action="store_false",
                   help="leave the collector as CPython sets it (an embedded broker's case)")
    p.add_argument("--held-in-records", action=argparse.BooleanOptionalAction,
                   default=BrokerConfig.held_in_records, help="BrokerConfig.held_in_records")
    p.add_argument("--spill-jobs", type=int, default=BrokerConfig.spill_jobs,
                   help="BrokerConfig.spill_jobs (the broker's, %(default)s; 0: dead stay inline)")
    p.add_argument("--out", help="results name under bench/results (default depth_bench, "
                   "depth_bench_quick with --quick)")
    p.add_argument("--note", help="text saved with the results (which sizes were left out)")
    p.add_argument("--one", nargs=2, metavar=("KIND", "DEPTH"), help=argparse.SUPPRESS)
    p.add_argument("--store-url", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.rounds = args.rounds or (5 if args.quick else 11)
    if args.rounds < 1 or args.drain_batch < 1 or args.dead_attempts < 1 \
            or not 1 <= args.claim_batch <= 10_000 or args.groups < 1:
        p.error("--rounds, --drain-batch, --dead-attempts and --groups must be at least 1 and "
                "--claim-batch within 1..10000")

    if args.one:  # the child: one (store, kind, depth), driven over stdin (see serve())
        if args.tune_gc:
            tune_for_broker_process()
        kind, depth = args.one[0], int(args.one[1])
        try:
            asyncio.run(serve(kind, args.store_url, depth, args))
        except Exception as exc:  # the row says why; the run goes on with the others
            say(RESULT_PREFIX, {"kind": kind, "depth": depth, "label": label(depth),
                                "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
        return

    try:
        depths = [parse_count(d) for d in (args.depths or (QUICK_DEPTHS if args.quick
                                                           else DEFAULT_DEPTHS)).split(",")]
    except ValueError as exc:
        p.error(str(exc))
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if not stores or any(s not in STORES for s in stores):
        p.error(f"--stores takes {','.join(STORES)} or one of them, got {args.stores[:40]!r}")
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not kinds or any(k not in KINDS for k in kinds):
        p.error(f"--kinds takes {','.join(KINDS)} or some of them, got {args.kinds[:40]!r}")
    config = {"depths": depths, "kinds": kinds, "stores": stores, "error_text": ERROR,
              **{k: getattr(args, k) for k in (
                  "rounds", "claim_batch", "dead_attempts", "drain_jobs", "drain_batch",
                  "fill_chunk", "step_budget_s", "tune_gc", "quick", "held_in_records",
                  "spill_jobs", "note", *(["groups"] if "grouped" in kinds else []))}}
    name = args.out or ("depth_bench_quick" if args.quick else "depth_bench")
    with contextlib.ExitStack() as stack:
        # set up one after the other (each alone on the machine), all kept up
        cases = grouped.with_reference([(k, d, s) for k in kinds for d in depths for s in stores],
                                       stores)  # with a grouped row's ungrouped 1k
        children = [Child(store, kind, depth, args, stack) for kind, depth, store in cases]
        progress(f"all set up; {args.rounds} interleaved rounds of small commits")
        loads = commit_rounds(children, args.rounds, args.step_budget_s)
        rows: list[dict[str, Any]] = []
        for child in children:  # drained one after the other
            rows.append(child.finish())
            # saved after every row: a run of hours keeps what it measured if cut short
            write_results(name, {"config": config, "notes": NOTES, "finished": False,
                                 "load_rounds": loads, "rows": rows})
        compare(children, rows)
        grouped.compare_grouped(children, rows)
    print_table(rows, args)
    path = write_results(name, {"config": config, "notes": NOTES, "finished": True,
                                "load_rounds": loads, "rows": rows})
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
