"""depth_bench's ``grouped`` kind (job groups: the small commit of a deep queue of
grouped jobs, against the ungrouped 1k queue's).

The queue is filled as ``pending`` but each job in group ``g{i % groups}``
(``--groups``, 10,000), pushed as the API takes grouped jobs (by reference into
segment objects where the broker does that for grouped pushes, else into the queue
object), and left pending; its rounds push 1 grouped job (group ``g0``). Its rows
add ``grouped_commit_ms``, ``grouped_commit_vs_ungrouped_1k`` (the median over
rounds of its round over the same store's ``pending`` 1k round, in the same round: a
run with ``grouped`` adds that ``pending`` 1k row when it was not asked for),
``grouped_head_bytes`` and ``grouped_rss_after_bytes``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from bench._measure import progress
from broker.model.ops import NewJob
from broker.service.broker import Broker

#: the reference row's (kind, depth) of every grouped row
REFERENCE = ("pending", 1_000)


def probe(kind: str) -> NewJob | bytes:
    """The job a round of ``kind`` pushes: in group ``g0`` for ``grouped``."""
    return NewJob(b'{"probe":1}', group="g0") if kind == "grouped" else b'{"probe":1}'

NOTES = {
    "grouped_commit_vs_ungrouped_1k": "grouped: median over rounds of the round's commits "
    "over the same store's pending 1k round, in the same round (acceptance: <= 2.0)",
    "grouped_head_bytes": "grouped: head_bytes (acceptance: < 1 MB)",
}


class Case(Protocol):
    store: str
    kind: str
    depth: int
    rounds: list[list[float]]


async def fill_grouped(broker: Broker, queue: str, row: dict[str, Any], args: Any,
                       payloads: Callable[[int, int], list[bytes]], tag: str) -> float:
    """Push ``row["depth"]`` jobs, ``args.fill_chunk`` a push, job ``i`` in group
    ``g{i % args.groups}`` (saved as ``row["groups"]``), as the API takes grouped jobs;
    seconds taken. Raises ``QueueFull`` as the broker does."""
    depth, chunk, groups = row["depth"], args.fill_chunk, args.groups
    row["groups"] = groups
    start = last = time.perf_counter()
    done = 0
    while done < depth:
        n = min(chunk, depth - done)
        await broker.push(queue, [NewJob(p, group=f"g{i % groups}") for i, p in
                                  enumerate(payloads(done, done + n), start=done)])
        done += n
        if time.perf_counter() - last > 10 and done < depth:
            last = time.perf_counter()
            progress(f"{tag}: filled {done:,} of {depth:,} grouped jobs in "
                     f"{last - start:.0f} s")
    return time.perf_counter() - start


def with_reference(cases: list[tuple[str, int, str]], stores: Sequence[str]
                   ) -> list[tuple[str, int, str]]:
    """``cases`` ((kind, depth, store)) with, first, each store's reference row when a
    grouped case is among them and the reference is not."""
    if not any(kind == "grouped" for kind, _, _ in cases):
        return cases
    return [(*REFERENCE, s) for s in stores if (*REFERENCE, s) not in cases] + cases


def compare_grouped(cases: Sequence[Case], rows: list[dict[str, Any]]) -> None:
    """Set each grouped row's ``grouped_*`` columns (see the module doc)."""
    for case, row in zip(cases, rows, strict=True):
        if case.kind != "grouped":
            continue
        row.update(grouped_commit_ms=row.get("commit_ms"),
                   grouped_head_bytes=row.get("head_bytes"),
                   grouped_rss_after_bytes=row.get("rss_after_fill_bytes"))
        ref = next((c for c in cases
                    if (c.store, c.kind, c.depth) == (case.store, *REFERENCE) and c.rounds),
                   None)
        if ref is None or not case.rounds:
            continue
        n = min(len(ref.rounds), len(case.rounds))
        row["grouped_commit_vs_ungrouped_1k"] = statistics.median(
            sum(case.rounds[i]) / sum(ref.rounds[i]) for i in range(n))


def print_grouped(rows: list[dict[str, Any]]) -> None:
    """One line per grouped row: its commit, ratio and head."""
    for r in rows:
        if r["kind"] != "grouped" or r.get("grouped_commit_ms") is None:
            continue
        ratio = r.get("grouped_commit_vs_ungrouped_1k")
        print(f"grouped {r['store']} {r['label']}: commit {r['grouped_commit_ms']:.2f} ms, "
              f"{'-' if ratio is None else format(ratio, '.2f')}x the ungrouped pending"
              f" 1k's; head {r['grouped_head_bytes'] / 1e6:,.3f} MB"
              f" ({r.get('groups', '?')} groups)")
