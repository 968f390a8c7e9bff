"""Group dispatch benchmark (broker.model.groups.dispatch, pure, in process).

    .venv/bin/python bench/groups_dispatch_bench.py [--jobs 200000] [--rounds 3]

What one claimed job costs in the pick alone, in ns, against today's ungrouped
claim's inner step (one ``heappop`` of the ready heap's packed ints):

- ``heap``: the ungrouped baseline, a heap of ``--jobs`` ready keys popped empty;
- ``groups=G batch=B``: ``--jobs`` jobs in G groups, claimed B at a time through
  ``Dispatch.pick`` and ``Dispatch.served`` (the caller's side included: a list
  per group, a :class:`Head` per turn); batch 100 takes quanta;
- ``parked=10000``: 10,000 groups at their limit beside 10 ready ones (a claim
  never looks at a parked group, so this is the cost of 10 groups).

Rounds are interleaved (``bench/_common.py``: ``in_rounds``); each row is the
median of its rounds. Prints a table and writes bench/results/groups_dispatch.json.
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import in_rounds, write_results  # noqa: E402
from broker.model.groups.dispatch import Dispatch, Head  # noqa: E402
from broker.model.groups.names import GroupNames  # noqa: E402
from broker.model.groups.settings import parse_group_settings  # noqa: E402
from broker.model.indexes import ready_key  # noqa: E402

NOW = 1_767_225_600_000


def heap_run(jobs: int) -> Callable[[], float]:
    def run() -> float:
        heap = [ready_key(0, NOW, seq) for seq in range(1, jobs + 1)]
        heapq.heapify(heap)
        t0 = time.perf_counter_ns()
        pop = heapq.heappop
        for _ in range(jobs):
            pop(heap)
        return (time.perf_counter_ns() - t0) / jobs
    return run


def dispatch_run(jobs: int, groups: int, batch: int, parked: int = 0) -> Callable[[], float]:
    def run() -> float:
        names = GroupNames()
        d = Dispatch(parse_group_settings({"group_limits": {f"p{i}": 0 for i in range(parked)}}
                                          if parked else {}, "bench"), names)
        queued: dict[int, list[int]] = {}
        for i in range(parked):  # at their limit (0): parked, never in the heap
            gid = names.gid(f"p{i}")
            d.set_head(gid, Head(0, ready_key(0, NOW, 10**12 + i), NOW), NOW)
        for seq in range(1, jobs + 1):
            queued.setdefault(names.gid(f"g{seq % groups}"), []).append(ready_key(0, NOW, seq))
        cursor = dict.fromkeys(queued, 0)
        for gid, keys in queued.items():
            d.set_head(gid, Head(0, keys[0], NOW), NOW)
        t0 = time.perf_counter_ns()
        left = jobs
        while left:
            want = min(batch, left)
            while want:
                pick = d.pick(NOW, want)
                if pick is None:
                    raise AssertionError("a group should be ready")
                gid, q = pick
                keys, at = queued[gid], cursor[gid]
                n = min(q, len(keys) - at)
                at = cursor[gid] = at + n
                d.served(gid, n, Head(0, keys[at], NOW) if at < len(keys) else None, NOW)
                want -= n
                left -= n
        return (time.perf_counter_ns() - t0) / jobs
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    jobs = args.jobs
    fns: dict[str, Callable[[], float]] = {"heap": heap_run(jobs)}
    for groups in (1, 10, 1_000, 100_000):
        for batch in (1, 100):
            fns[f"groups={groups} batch={batch}"] = dispatch_run(jobs, groups, batch)
    fns["parked=10000 groups=10 batch=1"] = dispatch_run(jobs, 10, 1, parked=10_000)
    runs = in_rounds(fns, args.rounds)
    rows = {name: statistics.median(values) for name, values in runs["values"].items()}
    base = rows["heap"]
    print(f"{'row':34} {'ns/job':>9} {'x heap':>7}")
    for name, ns in rows.items():
        print(f"{name:34} {ns:9.0f} {ns / base:7.1f}")
    path = write_results("groups_dispatch", {
        "jobs": jobs, "rounds": args.rounds, "ns_per_job": rows,
        "x_heap": {name: round(ns / base, 2) for name, ns in rows.items()},
        "rounds_ns": runs["values"], "load_per_round": runs["load"]})
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
