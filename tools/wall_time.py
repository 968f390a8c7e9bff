"""Where a pytest-xdist run's wall time goes: per worker, the tests it ran and when.

As a pytest plugin (``-p tools.wall_time`` with ``OSQ_WALL_TIME=DIR`` set): every
process of the run, the controller and each xdist worker, appends one JSON line per
test phase (setup, call, teardown) to ``DIR/<worker>.jsonl``: the node id, the phase,
its start (seconds since the epoch) and its duration (seconds). Without the variable
the plugin records nothing.

``python -m tools.wall_time DIR`` prints, per worker, its busy time (the sum of its
phases' durations), its first start and last stop relative to the run's first start,
and its slowest files; then the critical worker (the last to stop) and the run's span.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ENV = "OSQ_WALL_TIME"


def pytest_runtest_logreport(report: Any) -> None:
    """Appends the phase's line to the worker's file (the controller sees the same
    reports again, from every worker: it records nothing)."""
    out = os.environ.get(ENV)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if not out or hasattr(report, "node"):  # the controller, relaying a worker's report
        return
    line = {"nodeid": report.nodeid, "when": report.when, "start": getattr(report, "start", 0.0),
            "duration": report.duration, "outcome": report.outcome}
    path = Path(out) / f"{worker}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def summary(directory: Path, top: int = 8) -> str:
    """The per-worker table described in the module docstring."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        rows[path.stem] = [json.loads(line) for line in path.read_text().splitlines() if line]
    if not rows:
        return f"no records under {directory}"
    t0 = min(r["start"] for lines in rows.values() for r in lines if r["start"])
    out = []
    ends: dict[str, float] = {}
    for worker, lines in rows.items():
        busy = sum(r["duration"] for r in lines)
        first = min(r["start"] for r in lines) - t0
        last = max(r["start"] + r["duration"] for r in lines) - t0
        ends[worker] = last
        tests = len({r["nodeid"] for r in lines})
        out.append(f"{worker}: {tests} tests, busy {busy:.1f} s, "
                   f"from {first:.1f} s to {last:.1f} s")
        by_file: dict[str, float] = defaultdict(float)
        for r in lines:
            by_file[r["nodeid"].split("::")[0]] += r["duration"]
        for name, secs in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
            out.append(f"    {secs:7.1f} s  {name}")
    critical = max(ends, key=lambda w: ends[w])
    total = sum(r["duration"] for lines in rows.values() for r in lines)
    out.append(f"critical worker {critical}: stops at {ends[critical]:.1f} s; "
               f"sum of all durations {total:.1f} s")
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 8))
