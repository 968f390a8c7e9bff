"""Where the bad deploy's commit loop spends its time: bad_deploy_bench.py run as is
(the embedded default), with the embedded broker's commit loop timed from inside.

    .venv/bin/python bench/bad_deploy_profile.py [--window fail|drain|healthy]
        [bad_deploy_bench.py's options]

Only during one window, it records (``--window``: ``fail``, the default, the
failing passes, from the bench's "the bad deploy" progress line to its
"redrive" one; ``drain``, the fixed deploy's ``process()`` of the redriven
jobs; ``healthy``, the healthy drain of ``--healthy-first``, which it implies):

* each commit cycle (``CommitLoop._commit``): its wall time, its calls by kind, and
  the seconds of it spent in the target's ``prepare`` (segment and spill reads),
  ``before_write`` (spill objects planned, encoded and written), ``apply`` (by op)
  and ``encode``; the write is the rest;
* every store write seen by the bench's counting store: time, object kind (the
  head ``queue.json``, ``spills``, ``archive``...), bytes;
* a sample of every thread's stack every 5 ms (``sys._current_frames``):
  inclusive and leaf shares by function, per thread.

Writes ``bench/results/<out>_profile.txt`` (the figures) and
``<out>_cycles.json`` (the cycles and writes), beside the bench's own results
file. Monkeypatches the broker's classes in this process: a tool for finding
what is slow, never a figure to compare with bad_deploy_bench's own runs (the
sampling and the timing cost CPU of their own). Times in seconds.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench._measure as measure  # noqa: E402
from broker.commit.loop import CommitLoop  # noqa: E402
from broker.service.queue_target import QueueTarget  # noqa: E402

BENCH = ROOT / "bench" / "bad_deploy_bench.py"
SAMPLE_S = 0.005

active = threading.Event()
timings: dict[str, list[float]] = collections.defaultdict(list)
current: dict[str, float] = {}
cycles: list[tuple[float, float, int, dict[str, int], dict[str, float]]] = []
writes: list[tuple[float, str, int]] = []
inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
leaf: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
samples: collections.Counter[str] = collections.Counter()


def _note(name: str, seconds: float) -> None:
    if active.is_set():
        timings[name].append(seconds)
        current[name] = current.get(name, 0.0) + seconds


def _time_async(cls: Any, name: str) -> None:
    real = getattr(cls, name)

    @functools.wraps(real)
    async def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await real(self, *args, **kwargs)
        finally:
            _note(name, time.perf_counter() - start)

    setattr(cls, name, timed)


def _time_sync(cls: Any, name: str, by_op: bool = False) -> None:
    real = getattr(cls, name)

    @functools.wraps(real)
    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real(self, *args, **kwargs)
        finally:
            _note(f"{name}_{type(args[1]).__name__}" if by_op else name,
                  time.perf_counter() - start)

    setattr(cls, name, timed)


def _instrument() -> None:
    _time_async(QueueTarget, "prepare")
    _time_async(QueueTarget, "before_write")
    _time_sync(QueueTarget, "encode")
    _time_sync(QueueTarget, "apply", by_op=True)
    real_commit = CommitLoop._commit

    async def commit(self: Any, batch: Any) -> None:
        current.clear()
        start = time.perf_counter()
        try:
            await real_commit(self, batch)
        finally:
            if active.is_set():
                kinds = collections.Counter(type(item.op).__name__ for item in batch)
                cycles.append((start, time.perf_counter() - start, len(batch), dict(kinds),
                               dict(current)))

    CommitLoop._commit = commit  # type: ignore[method-assign]
    real_count = measure.CountingStore._count

    def count(self: Any, key: str, n: int) -> None:
        real_count(self, key, n)
        if active.is_set():
            writes.append((time.perf_counter(), key.split("/")[1] if "/" in key else key, n))

    measure.CountingStore._count = count  # type: ignore[method-assign]


def _sampler() -> None:
    me = threading.get_ident()
    while True:
        time.sleep(SAMPLE_S)
        if not active.is_set():
            continue
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            thread = names.get(ident, str(ident))
            funcs = []
            f: Any = frame
            while f is not None:
                funcs.append(f"{os.path.basename(f.f_code.co_filename)}:{f.f_code.co_name}")
                f = f.f_back
            samples[thread] += 1
            leaf[thread][funcs[0]] += 1
            inclusive[thread].update(set(funcs))


def _dump(out: str) -> None:
    results = ROOT / "bench" / "results"
    lines = []
    for name, values in sorted(timings.items()):
        v = sorted(values)
        lines.append(f"{name}: n={len(v)} total={sum(v):.2f}s p50={v[len(v) // 2] * 1e3:.2f}ms "
                     f"p99={v[int(len(v) * 0.99)] * 1e3:.2f}ms max={v[-1] * 1e3:.1f}ms")
    d = sorted(c[1] for c in cycles)
    if d:
        lines.append(f"cycles: n={len(d)} total={sum(d):.2f}s p50={d[len(d) // 2] * 1e3:.2f}ms "
                     f"p99={d[int(len(d) * 0.99)] * 1e3:.2f}ms max={d[-1] * 1e3:.1f}ms")
    by_kind: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    for _, kind, n in writes:
        row = by_kind[kind]
        row[0], row[1], row[2] = row[0] + 1, row[1] + n, max(row[2], n)
    for kind, (count, total, largest) in sorted(by_kind.items()):
        lines.append(f"writes {kind}: {count} objects, {total / 1e6:.1f} MB, largest {largest:,} B")
    for thread, n in samples.most_common():
        lines.append(f"=== thread {thread}: {n} samples; inclusive")
        lines += [f"{c / n * 100:6.1f}% {fn}" for fn, c in inclusive[thread].most_common(40)]
        lines.append("--- leaf")
        lines += [f"{c / n * 100:6.1f}% {fn}" for fn, c in leaf[thread].most_common(15)]
    (results / f"{out}_profile.txt").write_text("\n".join(lines) + "\n")
    (results / f"{out}_cycles.json").write_text(json.dumps({"cycles": cycles,
                                                            "writes": writes}))


#: Each window's first and last progress lines of bad_deploy_bench (substrings).
WINDOWS = {"fail": ("the bad deploy", "redrive of all"),
           "drain": ("the fixed deploy: process() draining", "the fixed deploy: drained"),
           "healthy": ("healthy baseline: process() draining", "healthy baseline: drained")}


def main() -> None:
    args = sys.argv[1:]
    window = "fail"
    if "--window" in args:
        i = args.index("--window")
        window = args[i + 1] if i + 1 < len(args) else ""
        del args[i:i + 2]
        if window not in WINDOWS:
            sys.exit(f"--window must be one of {', '.join(WINDOWS)}, not {window!r}")
    if window == "healthy" and "--healthy-first" not in args:
        args.append("--healthy-first")
    out = args[args.index("--out") + 1] if "--out" in args else "bad_deploy"
    first, last = WINDOWS[window]
    _instrument()
    real_progress = measure.progress

    def progress(what: str) -> None:
        if first in what:
            active.set()
        elif last in what and active.is_set():
            active.clear()
            _dump(out)
        real_progress(what)

    measure.progress = progress  # (bad_deploy_bench imports it from bench._measure)
    threading.Thread(target=_sampler, name="sampler", daemon=True).start()
    sys.argv = [str(BENCH), *args]
    runpy.run_path(str(BENCH), run_name="__main__")


if __name__ == "__main__":
    main()
