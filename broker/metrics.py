"""Prometheus text-format metrics, kept in plain dicts (no client library needed).

Exposed at ``GET /metrics``:

* ``osqueue_ops_total{queue,op,outcome}``: operations answered, by kind and outcome;
* ``osqueue_commit_seconds``: histogram of CAS commit latency (seconds);
* ``osqueue_commit_batch_ops``: histogram of operations per commit;
* ``osqueue_state_bytes{queue}``: size of the last written object (bytes);
* ``osqueue_jobs{queue,status}``: depth by status;
* ``osqueue_conflicts_total{queue}``, ``osqueue_unknown_outcomes_total{queue}``,
  ``osqueue_step_downs_total{queue}``, ``osqueue_commits_total{queue}``.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Iterable

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)


class Histogram:
    def __init__(self, buckets: Iterable[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def render(self, name: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        out, running = [], 0
        for bound, count in zip(self.buckets, self.counts, strict=False):
            running += count
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {running}')
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.sum}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Thread-safe counters, gauges and histograms for one broker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ops: dict[tuple[str, str, str], int] = defaultdict(int)
        self.commit_seconds = Histogram(LATENCY_BUCKETS)
        self.batch_ops = Histogram(BATCH_BUCKETS)
        self.gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def op(self, queue: str, op: str, outcome: str) -> None:
        with self._lock:
            self.ops[(queue, op, outcome)] += 1

    def commit(self, seconds: float, batch: int) -> None:
        with self._lock:
            self.commit_seconds.observe(seconds)
            self.batch_ops.observe(batch)

    def gauge(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self.gauges[(name, tuple(sorted(labels.items())))] = value

    def render(self) -> str:
        with self._lock:
            lines = [
                "# HELP osqueue_ops_total Operations answered, by queue, kind and outcome.",
                "# TYPE osqueue_ops_total counter",
            ]
            for (queue, op, outcome), n in sorted(self.ops.items()):
                lines.append(
                    f'osqueue_ops_total{{queue="{_esc(queue)}",op="{op}",outcome="{outcome}"}} {n}'
                )
            lines += ["# HELP osqueue_commit_seconds CAS commit latency in seconds.",
                      "# TYPE osqueue_commit_seconds histogram"]
            lines += self.commit_seconds.render("osqueue_commit_seconds")
            lines += ["# HELP osqueue_commit_batch_ops Operations per commit.",
                      "# TYPE osqueue_commit_batch_ops histogram"]
            lines += self.batch_ops.render("osqueue_commit_batch_ops")
            seen: set[str] = set()
            for (name, labels), value in sorted(self.gauges.items()):
                if name not in seen:
                    kind = "counter" if name.endswith("_total") else "gauge"
                    lines.append(f"# TYPE {name} {kind}")
                    seen.add(name)
                text = ",".join(f'{k}="{_esc(v)}"' for k, v in labels)
                lines.append(f"{name}{{{text}}} {value}")
        return "\n".join(lines) + "\n"
