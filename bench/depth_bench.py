"""Depth benchmark: what a small commit costs as the queue gets deep (with segment objects,
it should not grow with the depth).

    .venv/bin/python bench/depth_bench.py [--depths 1k,100k,1M,10M] [--stores file,s3]
        [--rounds 11] [--drain-jobs 1M] [--quick]

For each depth and each store (the local-file store, and S3 as a moto server on
127.0.0.1: ``python -m moto.server`` in a child process, one per depth), side by
side in one run, a fresh queue in a fresh process (``--one STORE DEPTH``: the
script re-invokes itself, so the memory figures are that depth's alone) runs an
in-process :class:`broker.service.broker.Broker` (self-test off, GC tuned as
in a broker's own process unless ``--no-tune-gc``). The processes fill their
queues one after the other and stay up; the small commits then run in
interleaved rounds across all of them (each round one claim and one complete in
every process, the order turning each round), so that depths are compared
within rounds; last, the processes drain one after the other. Measured:

* ``fill_s``: seconds to fill the queue to the depth with bulk pushes of
  ``--fill-chunk`` payloads (100,000 by default, the most one HTTP request may
  carry), each one commit. The queue's ``max_state_bytes`` is raised to 1 TiB,
  the most the model allows, so a depth is refused only if the model refuses
  it: then the row says ``refused: queue full`` and measures nothing else.
  Payloads are ``{"doc": i, "path": "s3://bucket/docs/<i>.json"}``.
* ``head_bytes``: bytes of the last version of the queue object written after
  filling (the head object only: the pending jobs of bulk pushes are in segment objects). For
  the file store, ``store_disk_bytes`` adds up every file under the store's
  directory (the file store keeps a second copy of the object).
* ``commit_ms``: the median time of one small commit, in milliseconds, over
  ``--rounds`` rounds of one claim of 1 job and then its complete, each timed
  on its own (so ``2 x rounds`` commits; ``claim_ms`` and ``complete_ms`` are
  the medians of each kind; ``*_ms_each`` every sample). Between rounds,
  untimed, the broker finishes the round's archive write, so every round sees
  the same queue.
  ``commit_vs_first`` is the median over the rounds of this depth's commit
  (the mean of its claim and complete) over the same store's at the smallest
  depth of the run, in the same round. ``bytes_per_commit`` is what the
  rounds wrote to the store, per commit.
* RSS of the process (the broker's: the only other thing in it is this
  driver, which holds at most one chunk of payloads): ``rss_*_bytes`` is
  VmRSS from /proc/self/status at that moment (after filling, after the
  commit rounds, at the end); ``peak_rss_*_bytes`` is ``ru_maxrss`` of
  ``resource.getrusage`` (the peak so far) at the same moments;
  ``trimmed_rss_after_fill_bytes`` is VmRSS after filling once glibc's
  ``malloc_trim(0)`` gave freed heap back (what the process holds, not what
  the allocator kept after the pushes' bursts; the later phases run after it).
* ``written_per_drained_job``: bytes written to the store per job drained,
  while the broker drains ``--drain-jobs`` jobs (capped at what is pending)
  in claims of ``--drain-batch`` (2,000) jobs, each followed by the complete
  of all of them. The issue states this figure for ``process()`` draining
  1M jobs; this is that commit pattern (claim 2,000, complete 2,000) driven
  in-process without Spark. Bytes are counted by a store wrapper summing the
  sizes of ``write_if_match``, ``create_if_absent`` and ``put`` calls (queue
  object versions and archive objects), up to the landing of the last
  complete's archive object. Today the object shrinks as jobs leave it, so
  draining a whole queue writes about half per job of what draining a small
  part of a deep one does.

Steps past ``--step-budget-s`` (900 s; commit rounds after at least 3 rounds,
and drains, whose rows then say how many jobs they drained) stop early; a
(store, depth) whose process does not answer (its fill, a round, its drain)
within ``--child-timeout-s`` is recorded as timed out. Long steps print
progress lines on stderr.

Prints a table and writes bench/results/depth_bench.json (``--quick``: depths
1k and 100k, 5 rounds, into depth_bench_quick.json). Sizes in the JSON are in
bytes, times in the unit their name ends with; the table shows MB (10^6 bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from bench._common import ChildProcess, load, moto_env, moto_s3, write_results
from broker import paths
from broker.errors import QueueFull
from broker.gcpause import tune_for_broker_process
from broker.model.ops import CompleteItems
from broker.service.broker import Broker
from broker.service.config import BrokerConfig
from broker.storage import Data, ObjectStore, Versioned, data_len, store_from_url

QUEUE = "depth"
STORES = ("file", "s3")
DEFAULT_DEPTHS = "1k,100k,1M,10M"
QUICK_DEPTHS = "1k,100k"
MIN_ROUNDS, _SUFFIXES = 3, {"k": 1_000, "m": 1_000_000}
#: the child's lines on stdout (see serve())
FILLED_PREFIX, ROUND_PREFIX, RESULT_PREFIX = "FILLED ", "ROUND ", "RESULT "

#: What the main figures of a row mean, saved with them (the module docstring has more).
NOTES = {
    "commit_ms": "median ms of one small commit: claim 1 job, then complete it, each timed",
    "head_bytes": "bytes of the queue object's last version after filling (today: all of it)",
    "rss_*_bytes": "VmRSS (/proc/self/status) of the broker's process at that moment",
    "peak_rss_*_bytes": "ru_maxrss (getrusage) of the broker's process: the peak so far",
    "trimmed_rss_after_fill_bytes": "VmRSS after filling and glibc's malloc_trim(0)",
    "written_per_drained_job": "bytes written to the store (queue object versions and "
    "archive objects) per job while draining in claims of drain_batch jobs, each then "
    "completed: the commit pattern of process() driven in-process, without Spark",
    "fill_s": "seconds to fill the queue with bulk pushes of fill_chunk jobs",
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


class CountingStore(ObjectStore):
    """Passes every call to ``inner``; adds up the bytes of the writes
    (``write_if_match``, ``create_if_absent``, ``put``) and keeps the size of the
    last version written of the queue object. Thread-safe (the broker writes
    from its I/O threads)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.written = 0
        self.head_bytes = 0
        self._state_key = paths.state_key(QUEUE)
        self._lock = threading.Lock()

    def _count(self, key: str, n: int) -> None:
        with self._lock:
            self.written += n
            if key == self._state_key:
                self.head_bytes = n

    def read(self, key: str) -> Versioned:
        return self.inner.read(key)

    def head(self, key: str) -> str:
        return self.inner.head(key)

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        etag = self.inner.write_if_match(key, data, etag)
        self._count(key, data_len(data))
        return etag

    def create_if_absent(self, key: str, data: Data) -> str:
        etag = self.inner.create_if_absent(key, data)
        self._count(key, data_len(data))
        return etag

    def put(self, key: str, data: bytes) -> str:
        etag = self.inner.put(key, data)
        self._count(key, len(data))
        return etag

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def close(self) -> None:
        self.inner.close()


def rss_bytes() -> int:
    """VmRSS of this process from /proc/self/status, in bytes (0 where absent)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def trimmed_rss_bytes() -> int | None:
    """VmRSS (bytes) after glibc's ``malloc_trim(0)`` handed freed heap back to the
    system: the memory the process still uses, without what the allocator keeps
    after a burst (None where there is no glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return None
    return rss_bytes()


def peak_rss_bytes() -> int:
    """``ru_maxrss`` of this process, in bytes (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def progress(what: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


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


async def one_round(broker: Broker) -> tuple[float, float]:
    """Claim 1 job and complete it; the seconds of each commit."""
    t0 = time.perf_counter()
    jobs = await broker.claim(QUEUE, "bench", 1, lease_s=600.0)
    t1 = time.perf_counter()
    if len(jobs) != 1:
        raise RuntimeError(f"claim of 1 job answered {len(jobs)}")
    await broker.complete(QUEUE, CompleteItems([j.token for j in jobs], [None]))
    return t1 - t0, time.perf_counter() - t1


async def settle_archive(broker: Broker) -> None:
    q = broker.served(QUEUE)
    if q is not None:
        await q.archiver.wait(3600.0)


async def drain(broker: Broker, store: CountingStore, target: int, batch: int,
                budget_s: float, tag: str) -> dict[str, Any]:
    """Claim ``batch`` jobs and complete them until ``target`` are done, the
    queue is empty or ``budget_s`` passed; bytes written per drained job."""
    written0 = store.written
    start = last = time.perf_counter()
    drained = 0
    stopped = "done"
    while drained < target:
        jobs = await broker.claim(QUEUE, "bench", min(batch, target - drained), lease_s=600.0)
        if not jobs:
            stopped = "queue empty"
            break
        await broker.complete(QUEUE, CompleteItems([j.token for j in jobs], [None] * len(jobs)))
        drained += len(jobs)
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


async def serve(kind: str, url: str, depth: int, args: argparse.Namespace) -> None:
    """The child of one (store, depth): fill a fresh queue and say ``FILLED {row}``;
    then, per line on stdin, ``round``: one claim of 1 job and its complete, each
    timed (``ROUND [claim_s, complete_s]``); ``finish``: the commit figures, the
    drain and the memory figures (``RESULT {row}``), and exit."""
    tag = f"{kind} {label(depth)}"
    store = CountingStore(store_from_url(url))
    broker = Broker(store, BrokerConfig(self_test=False))
    await broker.start()
    row: dict[str, Any] = {"store": kind, "depth": depth, "label": label(depth),
                           "rss_before_fill_bytes": rss_bytes()}
    try:
        await broker.create_queue(QUEUE, {"max_state_bytes": 1 << 40})
        progress(f"{tag}: filling")
        written0 = store.written
        try:
            row["fill_s"] = await fill(broker, depth, args.fill_chunk, tag)
        except QueueFull as exc:
            row["refused"] = f"refused: queue full ({str(exc)[:120]})"
        else:
            row["fill_bytes_written"] = store.written - written0
            row["pending_after_fill"] = (await broker.stats(QUEUE))["counts"]["pending"]
            row["head_bytes"] = store.head_bytes
            if kind == "file":
                row["store_disk_bytes"] = disk_bytes(Path(url.removeprefix("file://")))
            row["rss_after_fill_bytes"] = rss_bytes()
            row["peak_rss_after_fill_bytes"] = peak_rss_bytes()
            row["trimmed_rss_after_fill_bytes"] = trimmed_rss_bytes()
            progress(f"{tag}: filled in {row['fill_s']:.1f} s, object "
                     f"{row['head_bytes'] / 1e6:.2f} MB")
        say(FILLED_PREFIX, row)
        claims: list[float] = []  # seconds
        completes: list[float] = []
        written0 = store.written
        while True:
            command = (await asyncio.to_thread(sys.stdin.readline)).strip()
            if command == "round" and "refused" not in row:
                claim_s, complete_s = await one_round(broker)
                claims.append(claim_s)
                completes.append(complete_s)
                await settle_archive(broker)  # untimed: every round sees the same queue
                say(ROUND_PREFIX, [claim_s, complete_s])
                continue
            break
        if command != "finish":
            return  # the parent went away: no drain
        if claims:
            row.update(rounds=len(claims),
                       commit_ms=statistics.median(claims + completes) * 1e3,
                       claim_ms=statistics.median(claims) * 1e3,
                       complete_ms=statistics.median(completes) * 1e3,
                       claim_ms_each=[round(t * 1e3, 3) for t in claims],
                       complete_ms_each=[round(t * 1e3, 3) for t in completes],
                       bytes_per_commit=(store.written - written0) / (2 * len(claims)),
                       rss_after_commits_bytes=rss_bytes(),
                       peak_rss_after_commits_bytes=peak_rss_bytes())
            progress(f"{tag}: commit {row['commit_ms']:.1f} ms (median of "
                     f"{2 * len(claims)}); draining")
            target = min(args.drain_jobs, depth - len(claims))
            row.update(await drain(broker, store, target, args.drain_batch,
                                   args.step_budget_s, tag))
            row["rss_end_bytes"] = rss_bytes()
            row["peak_rss_end_bytes"] = peak_rss_bytes()
            per_job = row["written_per_drained_job"]
            progress(f"{tag}: drained {row['drained']:,} in {row['drain_s']:.1f} s, "
                     + (f"{per_job / 1e3:.1f} KB written per job" if per_job else "nothing"))
        say(RESULT_PREFIX, row)
    finally:
        await broker.stop()
        store.close()


# -- the parent: one child process per (store, depth) ----------------------------------


class Child(ChildProcess):
    """One (store, depth) in its own process (``--one``), kept up between commands;
    its store is a temporary directory, or a moto server of its own."""

    def __init__(self, kind: str, depth: int, args: argparse.Namespace,
                 stack: contextlib.ExitStack) -> None:
        self.kind, self.depth = kind, depth
        self.rounds: list[tuple[float, float]] = []  # (claim_s, complete_s)
        if kind == "file":
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
               "--step-budget-s", str(args.step_budget_s)]
        if not args.tune_gc:
            cmd.append("--no-tune-gc")
        print(f"== {kind} {label(depth)}", file=sys.stderr, flush=True)
        super().__init__(cmd, args, stack, env)
        self.row = self.answer(FILLED_PREFIX) or {}

    @property
    def base(self) -> dict[str, Any]:
        return {"store": self.kind, "depth": self.depth, "label": label(self.depth)}

    @property
    def ready(self) -> bool:
        return self.error is None and "fill_s" in self.row

    def round(self) -> None:
        got = self.command("round", ROUND_PREFIX)
        if got is not None:
            self.rounds.append((got[0], got[1]))

    def finish(self) -> dict[str, Any]:
        return self.result(self.base, RESULT_PREFIX)


def commit_rounds(children: list[Child], rounds: int, budget_s: float) -> list[float]:
    """``rounds`` interleaved rounds of one small commit pair in every ready child (the
    order turning each round; past ``budget_s``, after :data:`MIN_ROUNDS`, no more);
    the machine's 1-minute load after each round."""
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
    """Set each row's ``commit_vs_first``: the median over the rounds of its commit
    over the same store's at the first depth, in the same round."""
    for child, row in zip(children, rows, strict=True):
        first = next((c for c in children if c.kind == child.kind and c.rounds), None)
        if first is None or not child.rounds:
            continue
        n = min(len(first.rounds), len(child.rounds))
        row["commit_vs_first"] = statistics.median(
            sum(child.rounds[i]) / sum(first.rounds[i]) for i in range(n))


def fmt(value: Any, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value / scale, spec)


def print_table(rows: list[dict[str, Any]], batch: int) -> None:
    print(f"{'store':<5} {'depth':>6} {'fill s':>8} {'commit ms':>10} {'vs first':>8}"
          f" {'claim ms':>9} {'complete ms':>11} {'object MB':>10} {'RSS fill MB':>11}"
          f" {'trimmed MB':>10} {'peak RSS MB':>11} {'drained':>11} {'KB/drained job':>14}")
    for r in rows:
        problem = r.get("refused") or r.get("error")
        if problem:
            print(f"{r['store']:<5} {r['label']:>6}  {problem}")
            continue
        cut = " " if r["drain_stopped"] in ("done", "queue empty") else "*"
        print(f"{r['store']:<5} {r['label']:>6} {r['fill_s']:>8.1f} {r['commit_ms']:>10.2f}"
              f" {fmt(r.get('commit_vs_first'), '.2f'):>8} {r['claim_ms']:>9.2f}"
              f" {r['complete_ms']:>11.2f} {fmt(r['head_bytes'], ',.1f', 1e6):>10}"
              f" {fmt(r['rss_after_fill_bytes'], ',.1f', 1e6):>11}"
              f" {fmt(r['trimmed_rss_after_fill_bytes'], ',.1f', 1e6):>10}"
              f" {fmt(r['peak_rss_after_commits_bytes'], ',.1f', 1e6):>11}"
              f" {r['drained']:>10,}{cut} {fmt(r['written_per_drained_job'], ',.1f', 1e3):>14}")
    print("commit ms: median of one claim (1 job) and one complete, each one commit;"
          " vs first: over the same store at the smallest depth")
    print("RSS fill: VmRSS after filling; trimmed: the same after malloc_trim(0);"
          " peak RSS: ru_maxrss after the commit rounds")
    print(f"KB/drained job: bytes written to the store per job while draining in claims of"
          f" {batch:,} + completes (in-process: the commit pattern of process() without Spark);"
          " *: the drain stopped at --step-budget-s")


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--depths", help=f"comma-separated counts (default {DEFAULT_DEPTHS})")
    p.add_argument("--stores", default=",".join(STORES), help="file,s3 or one of them")
    p.add_argument("--rounds", type=int, help="claim+complete rounds per depth (default 11)")
    p.add_argument("--drain-jobs", type=parse_count, default=1_000_000,
                   help="jobs drained per depth, capped at what is pending (default 1M)")
    p.add_argument("--drain-batch", type=int, default=2_000, help="jobs a drain claim takes")
    p.add_argument("--fill-chunk", type=parse_count, default=100_000, help="jobs a fill push holds")
    p.add_argument("--step-budget-s", type=float, default=900.0,
                   help="stop the commit rounds (after 3) and the drain past this (0: never)")
    p.add_argument("--child-timeout-s", type=float, default=4 * 3600.0,
                   help="give up on a (store, depth) that does not answer within this: "
                        "its fill, a round or its drain (0: never)")
    p.add_argument("--quick", action="store_true", help="depths 1k and 100k, 5 rounds")
    p.add_argument("--no-tune-gc", dest="tune_gc", action="store_false",
                   help="leave the collector as CPython sets it (an embedded broker's case)")
    p.add_argument("--out", help="results name under bench/results (default depth_bench, "
                   "depth_bench_quick with --quick)")
    p.add_argument("--one", nargs=2, metavar=("STORE", "DEPTH"), help=argparse.SUPPRESS)
    p.add_argument("--store-url", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.rounds = args.rounds or (5 if args.quick else 11)
    if args.rounds < 1 or args.drain_batch < 1:
        p.error("--rounds and --drain-batch must be at least 1")

    if args.one:  # the child: one (store, depth), driven over stdin (see serve())
        if args.tune_gc:
            tune_for_broker_process()
        kind, depth = args.one[0], int(args.one[1])
        try:
            asyncio.run(serve(kind, args.store_url, depth, args))
        except Exception as exc:  # the row says why; the run goes on with the others
            say(RESULT_PREFIX, {"store": kind, "depth": depth, "label": label(depth),
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
    config = {"depths": depths, "stores": stores, "rounds": args.rounds,
              "drain_jobs": args.drain_jobs, "drain_batch": args.drain_batch,
              "fill_chunk": args.fill_chunk, "step_budget_s": args.step_budget_s,
              "tune_gc": args.tune_gc, "quick": args.quick}
    name = args.out or ("depth_bench_quick" if args.quick else "depth_bench")
    with contextlib.ExitStack() as stack:
        # filled one after the other (each fill alone on the machine), all kept up
        children = [Child(kind, depth, args, stack) for depth in depths for kind in stores]
        progress(f"all filled; {args.rounds} interleaved rounds of small commits")
        loads = commit_rounds(children, args.rounds, args.step_budget_s)
        rows: list[dict[str, Any]] = []
        for child in children:  # drained one after the other
            rows.append(child.finish())
            # saved after every row: a run of hours keeps what it measured if cut short
            write_results(name, {"config": config, "notes": NOTES, "finished": False,
                                 "load_rounds": loads, "rows": rows})
        compare(children, rows)
    print_table(rows, args.drain_batch)
    path = write_results(name, {"config": config, "notes": NOTES, "finished": True,
                                "load_rounds": loads, "rows": rows})
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
