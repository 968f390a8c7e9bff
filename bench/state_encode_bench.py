"""Commit encode cost: incremental (cached per-job bytes) versus a full re-encode.

For each queue size it builds a state of N pending jobs, encodes it once, then
times, in interleaved rounds (``--rounds``, default 5, the order turning each
round), a commit that changes 1,000 jobs (claims them) and encodes incrementally,
and a full re-encode of the same state. The figures are the medians of the rounds;
``speedup`` is the median of the rounds' full / incremental.

    .venv/bin/python bench/state_encode_bench.py [--sizes 10000,100000,1000000] [--rounds 5]

Prints a table and writes bench/results/state_encode.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from bench._common import interleaved, median_ratio, write_results
from broker.model import state as S
from broker.model import tokens
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.ops import Claim, NewJob, Push

CHANGED = 1_000


def build(n: int) -> S.QueueState:
    st = T.new_state(0)
    tokens.bind(st, "bench", os.urandom)  # as a broker binds a queue it makes
    batch = 10_000
    for start in range(0, n, batch):
        jobs = tuple(
            NewJob(orjson.dumps({"doc": i, "path": f"s3://bucket/docs/{i}.json"}))
            for i in range(start, min(n, start + batch))
        )
        T.apply(st, Push(jobs), 1_000)
    return st


def measure(n: int, rounds: int) -> dict[str, Any]:
    st = build(n)
    codec.stamp(st, "bench", 1_000)
    codec.encode(st)  # the commit that wrote these jobs cached their bytes
    now = 2_000

    def change_and_encode() -> None:
        nonlocal now
        now += 1
        T.apply(st, Claim("bench", CHANGED, 60_000), now)
        codec.stamp(st, "bench", now)
        codec.encode(st)

    timed = interleaved({"incremental": change_and_encode,
                         "full": lambda: codec.encode_full(st)}, rounds)
    inc, full = timed["seconds"]["incremental"], timed["seconds"]["full"]
    size = len(codec.encode(st))
    assert orjson.loads(codec.encode(st)) == orjson.loads(codec.encode_full(st))
    return {"jobs": n, "incremental_s": statistics.median(inc),
            "full_s": statistics.median(full), "speedup": median_ratio(full, inc),
            "object_bytes": size, "incremental_s_rounds": inc, "full_s_rounds": full,
            "load_rounds": timed["load"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args()
    rows = [measure(int(n), args.rounds) for n in args.sizes.split(",")]
    print(f"{'jobs':>10} {'object MB':>10} {'incremental ms':>15} {'full ms':>10} {'speedup':>8}")
    for r in rows:
        print(f"{r['jobs']:>10,} {r['object_bytes'] / 1e6:>10.1f} {r['incremental_s'] * 1e3:>15.2f}"
              f" {r['full_s'] * 1e3:>10.2f} {r['speedup']:>7.1f}x")
    print("(incremental: claim 1,000 jobs, then encode; includes the claim itself)")
    path = write_results("state_encode", {"changed_per_commit": CHANGED,
                                          "rounds": args.rounds, "rows": rows})
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
