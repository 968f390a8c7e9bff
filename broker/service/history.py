"""The recent history of the queues a broker serves, for the dashboard's charts.

Every ``interval_s`` (10 s by default) :meth:`History.run` samples each queue
this broker serves: its totals (jobs pushed, completed, failed, dead since the
queue began: the object's counters), its depth (jobs not finished) and this
broker's commit count. Each sample is read through the queue's commit loop
(an :class:`~broker.model.ops.Inspect` read, O(1): no job is looked at), so it
counts committed operations only; a queue whose loop cannot answer within an
interval is skipped that round.

**Bounded memory.** A queue keeps the samples of the last ``window_s`` (an
hour: 361 samples of 56 bytes packed, about 32 KB with their overhead); at
most ``max_queues`` queues are kept (the longest unsampled go first), and a
queue that left the store is forgotten. Nothing is written anywhere: a
restarted broker starts a new history, and a queue that moved to another
broker has its history there from then on.

:meth:`History.series` turns the samples into what the charts draw: per
interval, the jobs pushed, completed, failed and dead in it (differences of
totals; never negative), and the depth at its end.
"""

from __future__ import annotations

import asyncio
import logging
import math
import struct
import time
from collections import deque
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from broker import timefmt
from broker.errors import OsqueueError
from broker.model.ops import Inspect
from broker.service.broker import Broker

log = logging.getLogger("osqueue.history")

#: One sample, packed: when (ms), enqueued, completed, failed, dead, depth, commits.
_SAMPLE = struct.Struct("<7q")
#: The totals a chart draws per interval (differences of consecutive samples).
TOTALS = ("enqueued", "completed", "failed", "dead")
#: How far back the commit rate looks (s).
RATE_WINDOW_S = 60.0


class History:
    """The samples of the queues ``broker`` serves (see the module docstring).

    ``interval_s`` between samples (> 0), ``window_s`` kept (>= interval_s),
    at most ``max_queues`` queues. Raises ``ValueError`` for bad bounds.
    """

    def __init__(self, broker: Broker, *, interval_s: float = 10.0, window_s: float = 3600.0,
                 max_queues: int = 256, clock: Callable[[], int] = timefmt.now_ms,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if not interval_s > 0 or not window_s >= interval_s or max_queues < 1:
            raise ValueError("history wants interval_s > 0, window_s >= interval_s and "
                             "max_queues >= 1")
        self.broker = broker
        self.interval_s = interval_s
        self.window_s = window_s
        self.max_queues = max_queues
        self.capacity = math.ceil(window_s / interval_s) + 1
        self._clock = clock
        self._monotonic = monotonic
        self._samples: dict[str, deque[bytes]] = {}

    def __len__(self) -> int:
        return len(self._samples)

    async def run(self) -> None:
        """Sample every ``interval_s`` until the broker stops (or the task is
        cancelled); a failed round is logged and the next one goes on."""
        while not self.broker.stopping:
            started = self._monotonic()
            try:
                await self.sample()
            except Exception:  # a periodic task must outlive any one failure
                log.exception("history sample failed")
            await asyncio.sleep(max(0.0, self.interval_s - (self._monotonic() - started)))

    async def sample(self) -> int:
        """Take one sample of each queue served here now; how many were taken."""
        broker = self.broker
        names = broker.queue_names()
        for gone in set(self._samples) - set(names):
            del self._samples[gone]
        served = [(name, q) for name in names if (q := broker.served(name)) is not None]

        async def one(name: str, q: Any) -> bool:
            # Not wait_for: on Python 3.11 it swallows a cancellation that comes with the answer.
            try:
                async with asyncio.timeout(self.interval_s):
                    result = await q.loop.submit(Inspect("counters"))
            except (OsqueueError, TimeoutError) as exc:
                log.debug("history: no sample of %s this round (%s)", name, exc)
                return False
            c = result.view
            self.record(name, self._clock(), c["enqueued"], c["completed"], c["failed"],
                        c["dead"], c["depth"], q.loop.stats.commits)
            return True

        taken = await asyncio.gather(*(one(name, q) for name, q in served))
        return sum(taken)

    def record(self, queue: str, at_ms: int, enqueued: int, completed: int, failed: int,
               dead: int, depth: int, commits: int) -> None:
        """Keep one sample of ``queue`` (dropping the oldest past the window, and
        the longest unsampled queue past ``max_queues``)."""
        samples = self._samples.pop(queue, None)  # re-inserted: dict order is recency
        if samples is None:
            samples = deque(maxlen=self.capacity)
            while len(self._samples) >= self.max_queues:
                del self._samples[next(iter(self._samples))]
        samples.append(_SAMPLE.pack(at_ms, enqueued, completed, failed, dead, depth, commits))
        self._samples[queue] = samples

    def samples(self, queue: str) -> list[tuple[int, ...]]:
        """The samples of ``queue``, oldest first: (at_ms, enqueued, completed,
        failed, dead, depth, commits)."""
        return [_SAMPLE.unpack(raw) for raw in self._samples.get(queue, ())]

    def series(self, queue: str) -> dict[str, Any]:
        """What the charts draw: ``t`` (end of each interval, s since the epoch),
        the jobs pushed (``enqueued``), ``completed``, ``failed`` and ``dead``
        in each interval, and ``depth`` at its end. Empty lists before two samples."""
        rows = self.samples(queue)
        out: dict[str, Any] = {"interval_s": self.interval_s, "window_s": self.window_s,
                               "t": [], "depth": [], **{name: [] for name in TOTALS}}
        for before, after in pairwise(rows):
            out["t"].append(after[0] / 1000)
            out["depth"].append(after[5])
            for i, name in enumerate(TOTALS, start=1):
                out[name].append(max(0, after[i] - before[i]))
        return out

    def commit_rate(self, queue: str, commits_now: int | None = None) -> float | None:
        """Commits per second over the last :data:`RATE_WINDOW_S` of samples (and
        ``commits_now``, this broker's count now, if given); None before there are
        two points to tell it by."""
        points = [(at, commits) for at, *_, commits in self.samples(queue)]
        if not points:
            return None
        if commits_now is not None:
            points.append((self._clock(), commits_now))
        return _rate(points)

    def total_rate(self, queue: str, total: str) -> float | None:
        """``total`` (one of :data:`TOTALS`: ``completed``, ...) per second over the
        last :data:`RATE_WINDOW_S` of samples; None before there are two. Raises
        ``ValueError`` for another name."""
        column = 1 + TOTALS.index(total)
        return _rate([(row[0], row[column]) for row in self.samples(queue)])


def _rate(points: list[tuple[int, int]]) -> float | None:
    """How fast a total grew over the last :data:`RATE_WINDOW_S` of ``points``
    ((ms, total), oldest first), per second (never negative); None without two
    points apart in time."""
    if not points:
        return None
    end_ms, end = points[-1]
    start_ms, start = points[0]
    for at, total in points:
        if end_ms - at <= RATE_WINDOW_S * 1000:
            start_ms, start = at, total
            break
    if end_ms - start_ms <= 0:
        return None
    return max(0, end - start) / ((end_ms - start_ms) / 1000)
