"""S3 write memory benchmark: what one conditional write of a large queue object costs
the broker's process in memory (RSS) and time, on S3 (moto's server on 127.0.0.1 in a
process of its own), for this tree and, side by side in the same run, another
checkout (``--base``, e.g. a detached checkout of main: the "before").

    .venv/bin/python bench/s3_write_memory_bench.py [--sizes 50M,200M] [--writes 3]
        [--base /work/base-s3mem]

For each size and each tree, a fresh process (``--one``; the script re-invokes
itself with that tree first on ``PYTHONPATH``, so ``broker.storage`` is that tree's)
builds the object as the codec hands it to the store (a list of parts: blocks of
1,024 job lines of about 400 bytes, as a head of held jobs is), then writes it
``--writes`` times with ``S3Store.write_if_match`` (each write conditional on the
last one's ETag, as the commit loop's are). Measured, in that process:

* ``parts_rss_bytes``: VmRSS once the parts exist (before any write);
* ``peak_rss_bytes``: ``ru_maxrss`` after the writes (the peak of the process);
* ``write_extra_bytes``: peak minus ``parts_rss_bytes``: what the writes added at
  their peak, over the object the broker holds anyway (its cached blocks);
  ``extra_per_head``: that over the object's size; ``peak_per_head``: the
  process's peak over the object's size;
* ``write_s``: the median seconds of one write (``write_s_each``: every write).

The trees' processes for one size run one after the other, "before" first. Prints
a table and writes bench/results/s3_write_memory.json (sizes in bytes, times in s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

# the child imports the tree it measures (``--one``: BENCH_TREE), the parent this one
sys.path.insert(0, os.environ.get("BENCH_TREE") or str(Path(__file__).resolve().parent.parent))

from bench._common import moto_env, moto_s3, write_results
from bench._measure import peak_rss_bytes, progress, rss_bytes

HERE = Path(__file__).resolve().parent.parent
RESULT_PREFIX = "RESULT "
BLOCK_JOBS = 1_024
LINE = b',\n{"id":"' + b"0" * 26 + b'","p":{"doc":1,"path":"s3://bucket/docs/1.json"},' \
    + b'"state":"claimed","attempts":1,"owner":"bench-worker","lease":"2026-11-28T14:00:00Z",' \
    + b'"token":"' + b"t" * 120 + b'","claimed_at":"2026-11-28T13:00:00Z"}' + b" " * 104
NOTES = {
    "parts_rss_bytes": "VmRSS once the object's parts exist, before any write",
    "peak_rss_bytes": "ru_maxrss of the process after the writes",
    "write_extra_bytes": "peak_rss_bytes - parts_rss_bytes: what the writes added at their peak",
    "extra_per_head": "write_extra_bytes / head_bytes",
    "peak_per_head": "peak_rss_bytes / head_bytes (the process: interpreter, boto3, the parts)",
    "write_s": "median seconds of one conditional write (write_if_match) to moto",
}


def parse_size(text: str) -> int:
    """``50M`` / ``200M`` / ``1G`` (10^6, 10^9 bytes) or a plain count of bytes."""
    t = text.strip().upper()
    scale = {"K": 10**3, "M": 10**6, "G": 10**9}.get(t[-1:], 1)
    return int(float(t[:-1] if scale > 1 else t) * scale)


def parts_of(size: int) -> list[bytes]:
    """About ``size`` bytes as the codec's parts: a header, then distinct blocks of
    :data:`BLOCK_JOBS` lines (each block its own bytes object, as cached blocks are)."""
    block = LINE * BLOCK_JOBS
    parts = [b'{"v":5,"seq":1', b',\n"jobs":[\n']
    while sum(map(len, parts)) < size:
        parts.append(bytes(bytearray(block)))  # a copy: every block is its own object
    parts.append(b"\n]}\n")
    return parts


def one(size: int, writes: int, url: str) -> dict[str, Any]:
    """In the child: write ``size`` bytes of parts ``writes`` times; the figures."""
    from broker.storage import store_from_url

    assert Path(sys.modules["broker"].__file__ or "").is_relative_to(os.environ["BENCH_TREE"])
    store = store_from_url(url)
    etag = store.create_if_absent("q/queue.json", b"{}")
    parts = parts_of(size)
    head = sum(map(len, parts))
    before = rss_bytes()
    times = []
    for _ in range(writes):
        start = time.perf_counter()
        etag = store.write_if_match("q/queue.json", parts, etag)
        times.append(time.perf_counter() - start)
    peak = peak_rss_bytes()
    store.close()
    return {"head_bytes": head, "parts_rss_bytes": before, "peak_rss_bytes": peak,
            "write_extra_bytes": peak - before, "extra_per_head": (peak - before) / head,
            "peak_per_head": peak / head,
            "write_s": statistics.median(times), "write_s_each": [round(t, 3) for t in times]}


def run_child(tree: Path, size: int, writes: int) -> dict[str, Any]:
    bucket = f"s3mem-{uuid.uuid4().hex[:8]}"
    with moto_s3(bucket) as endpoint:
        url = f"s3://{bucket}/bench?endpoint={endpoint}&timeout_s=900&retries=1"
        env = {**moto_env(), "PYTHONPATH": str(tree), "BENCH_TREE": str(tree)}
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one",
                              str(size), str(writes), url], env=env, cwd=tree,
                             capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            row: dict[str, Any] = json.loads(line[len(RESULT_PREFIX):])
            return row
    return {"error": (out.stderr.strip().splitlines() or ["no answer"])[-1][:300]}


def git_head(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", default="50M,200M", help="object sizes (default 50M,200M)")
    p.add_argument("--writes", type=int, default=3, help="writes per size and tree")
    p.add_argument("--base", help="another checkout to measure first (the 'before')")
    p.add_argument("--out", default="s3_write_memory", help="results name under bench/results")
    p.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        size, writes, url = int(args.one[0]), int(args.one[1]), args.one[2]
        print(RESULT_PREFIX + json.dumps(one(size, writes, url)), flush=True)
        return
    trees = ([("before", Path(args.base).resolve())] if args.base else []) + [("after", HERE)]
    rows = []
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        for name, tree in trees:
            progress(f"{name} ({tree}): {size / 1e6:.0f} MB x {args.writes}")
            row = {"tree": name, "commit": git_head(tree), "size": size,
                   **run_child(tree, size, args.writes)}
            rows.append(row)
    print(f"{'tree':<7} {'commit':<9} {'head MB':>8} {'peak MB':>8} {'extra MB':>9}"
          f" {'extra/head':>10} {'write s':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['tree']:<7} {r['commit']:<9} error: {r['error']}")
            continue
        print(f"{r['tree']:<7} {r['commit']:<9} {r['head_bytes'] / 1e6:>8.1f}"
              f" {r['peak_rss_bytes'] / 1e6:>8.0f} {r['write_extra_bytes'] / 1e6:>9.0f}"
              f" {r['extra_per_head']:>10.2f} {r['write_s']:>8.2f}")
    path = write_results(args.out, {"config": {"sizes": args.sizes, "writes": args.writes,
                                               "base": bool(args.base)},
                                    "notes": NOTES, "rows": rows})
    print(f"results written to {path}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
