"""The broker's Prometheus metrics, exposed at ``GET /metrics`` by prometheus-client.

Each :class:`Metrics` has a registry of its own (two brokers in one process,
as the tests run them, never share a series), with the standard process,
platform and garbage-collector collectors on it (``process_*``,
``python_info``, ``python_gc_*``) and these:

* ``osqueue_ops_total{queue,op,outcome}``: operations answered, by kind and
  outcome (``ok`` or the error's stable code);
* ``osqueue_commit_seconds``: histogram of CAS commit latency (seconds);
* ``osqueue_commit_batch_ops``: histogram of operations per commit;
* ``osqueue_state_bytes{queue}``: size of the last written object (bytes);
* ``osqueue_jobs{queue,status}``: depth by status (``cancelled``: awaiting the
  archive, as ``completed``);
* ``osqueue_cancelled_total{queue}``: cancels that took (jobs cancelled, and
  claimed jobs marked), as the queue object counts them;
* ``osqueue_claims_per_s{queue}``: jobs claimed a second, over the last 10 s
  on this broker; ``osqueue_claim_limit_per_s{queue}``: the dispatch rate
  limit (0: none); ``osqueue_claim_tokens{queue}``: whole tokens left in its
  bucket (only with a limit);
* ``osqueue_groups_known{queue}``, ``osqueue_groups_at_limit{queue}``,
  ``osqueue_group_held_back_jobs{queue}``: while a served queue's claims go by
  groups, its groups with ready or claimed jobs, those at their limit, and
  their ready jobs held back (no per-group label: group names are unbounded);
* ``osqueue_serving{queue}``: 1 while this broker owns the queue;
* ``osqueue_commits_total``, ``osqueue_conflicts_total``,
  ``osqueue_unknown_outcomes_total``, ``osqueue_answered_unknown_total``,
  ``osqueue_step_downs_total``, ``osqueue_faults_total`` (each ``{queue}``).

A series exists only for a queue this broker has served: reading a queue
that does not exist creates none.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.commit.target import CommitStats
from broker.model.state import QueueState

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)

#: The HELP text of each figure the broker sets (see :meth:`Metrics.gauge`).
HELP = {
    "osqueue_state_bytes": "Size of the queue object last written, in bytes.",
    "osqueue_jobs": "Jobs in the queue, by status.",
    "osqueue_cancelled_total": "Cancels that took: jobs cancelled, and claimed jobs marked.",
    "osqueue_claims_per_s": "Jobs claimed a second, over the last 10 s on this broker.",
    "osqueue_claim_limit_per_s": "The queue's dispatch rate limit in jobs a second (0: none).",
    "osqueue_claim_tokens": "Whole tokens left in the dispatch rate limit's bucket.",
    "osqueue_groups_known": "Job groups with ready or claimed jobs.",
    "osqueue_groups_at_limit": "Job groups holding as many claimed jobs as their limit.",
    "osqueue_group_held_back_jobs": "Ready jobs of groups at their limit.",
    "osqueue_serving": "1 while this broker owns the queue, else 0.",
    "osqueue_commits_total": "Batches written to the queue object.",
    "osqueue_conflicts_total": "Conditional writes that lost to another writer.",
    "osqueue_unknown_outcomes_total": "Writes whose outcome storage did not report.",
    "osqueue_answered_unknown_total": "Calls answered outcome_unknown.",
    "osqueue_step_downs_total": "Times this broker stopped owning the queue.",
    "osqueue_faults_total": "Batches that failed on storage.",
}

CONTENT_TYPE = CONTENT_TYPE_LATEST

Labels = tuple[tuple[str, str], ...]


class Metrics:
    """Counters, gauges and histograms of one broker; safe from any thread."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._lock = threading.Lock()
        # Counted in a plain dict and turned into samples only when scraped: op()
        # runs on every call the broker answers (bench/broker_bench.py).
        self._ops: dict[tuple[str, str, str], int] = defaultdict(int)
        self._gauges: dict[str, dict[Labels, float]] = {}
        self.commit_seconds = Histogram(
            "osqueue_commit_seconds", "CAS commit latency in seconds.",
            buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_ops = Histogram(
            "osqueue_commit_batch_ops", "Operations per commit.",
            buckets=BATCH_BUCKETS, registry=self.registry)
        self.registry.register(_Figures(self))

    def op(self, queue: str, op: str, outcome: str) -> None:
        """Count one answered operation (``outcome``: ``ok`` or an error code)."""
        with self._lock:
            self._ops[(queue, op, outcome)] += 1

    def commit(self, seconds: float, batch: int) -> None:
        """Record one commit: its latency (seconds) and its operations."""
        self.commit_seconds.observe(seconds)
        self.batch_ops.observe(batch)

    def gauge(self, name: str, value: float, **labels: str) -> None:
        """Set figure ``name`` (a counter if it ends in ``_total``) for ``labels``."""
        with self._lock:
            self._gauges.setdefault(name, {})[tuple(sorted(labels.items()))] = value

    def drop_gauge(self, name: str, **labels: str) -> None:
        """Forget figure ``name`` for ``labels`` (set by :meth:`gauge`), if set."""
        with self._lock:
            self._gauges.get(name, {}).pop(tuple(sorted(labels.items())), None)

    def queue_gauges(self, queue: str, stats: CommitStats, serving: bool,
                     state: QueueState | None, now_ms: int) -> None:
        """Set one queue's figures: its commit loop's counters, whether this broker
        serves it (owns it), and from its ``state`` (None: not served here) its
        jobs by status, cancels and claim rate at ``now_ms``."""
        for counter in ("commits", "conflicts", "unknown_outcomes", "answered_unknown",
                        "step_downs", "faults"):
            self.gauge(f"osqueue_{counter}_total", getattr(stats, counter), queue=queue)
        self.gauge("osqueue_serving", int(serving), queue=queue)
        if state is None:
            return
        for status, n in state.count_by_status().items():
            self.gauge("osqueue_jobs", n, queue=queue, status=status)
        self.gauge("osqueue_cancelled_total", state.counters.cancelled, queue=queue)
        figures = state.claims.figures(state.settings, now_ms)
        self.gauge("osqueue_claims_per_s", figures["claims_per_s"], queue=queue)
        self.gauge("osqueue_claim_limit_per_s", figures["claim_limit_per_s"] or 0, queue=queue)
        if figures["claim_tokens"] is not None:
            self.gauge("osqueue_claim_tokens", figures["claim_tokens"], queue=queue)
        else:  # (a limit lifted: its bucket's figure goes)
            self.drop_gauge("osqueue_claim_tokens", queue=queue)
        groups = state.groups  # (built by the claims of a queue that uses groups)
        if groups is not None:
            block = groups.stats(busiest=0)  # O(groups with ready or claimed jobs)
            self.gauge("osqueue_groups_known", block["known"], queue=queue)
            self.gauge("osqueue_groups_at_limit", block["held_back"]["groups_at_limit"],
                       queue=queue)
            self.gauge("osqueue_group_held_back_jobs", block["held_back"]["jobs"], queue=queue)
        else:
            for name in ("osqueue_groups_known", "osqueue_groups_at_limit",
                         "osqueue_group_held_back_jobs"):
                self.drop_gauge(name, queue=queue)

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format (:data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)

    def render(self) -> str:
        return self.exposition().decode()

    def families(self) -> Iterator[Metric]:
        """The broker's own figures as metric families (read by the registry)."""
        with self._lock:
            ops = sorted(self._ops.items())
            gauges = {name: sorted(series.items()) for name, series in self._gauges.items()}
        family = CounterMetricFamily("osqueue_ops", "Operations answered, by queue, kind "
                                     "and outcome.", labels=["queue", "op", "outcome"])
        for (queue, op, outcome), n in ops:
            family.add_metric([queue, op, outcome], n)
        yield family
        for name, series in sorted(gauges.items()):
            names = [k for k, _ in series[0][0]] if series else []
            kind = CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily
            out = kind(name, HELP.get(name, name), labels=names)
            for labels, value in series:
                out.add_metric([v for _, v in labels], value)
            yield out


class _Figures(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.families()

    def describe(self) -> list[Metric]:
        return []  # names vary with the figures set; nothing to check up front
