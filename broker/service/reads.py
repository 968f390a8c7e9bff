"""The broker's reads besides pages of jobs: a queue's stats, and one job by
id wherever it is. A part of :class:`broker.service.broker.Broker`
(which inherits it), kept apart because the coordinator is at its size limit.

A read never moves a queue: a broker that does not serve the queue answers
from the stored object (see :meth:`Broker._read <broker.service.broker.Broker>`
and :mod:`broker.service.lookup`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from broker import paths
from broker.model.format import archive
from broker.model.ops import Inspect, ReadJobs, ReadStats
from broker.model.state import QueueState
from broker.service import lookup
from broker.service.segment_store import SegmentStore
from broker.service.served_queue import ServedQueue
from broker.storage import ObjectStore


class _Broker(Protocol):
    store: ObjectStore
    segments: SegmentStore
    _queues: dict[str, ServedQueue]

    def clock(self) -> int: ...

    def monotonic(self) -> float: ...

    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def _read(self, queue: str, op: ReadStats | ReadJobs) -> Any: ...

    async def read_object(self, name: str) -> tuple[QueueState, str] | None: ...


class ReadCalls:
    """:meth:`stats`, :meth:`job` and :meth:`archived`, for
    :class:`~broker.service.broker.Broker`."""

    async def stats(self: _Broker, queue: str) -> dict[str, Any]:
        """Counts and figures of ``queue`` (:func:`broker.model.views.stats`); on
        the broker serving it also this broker's: its commits, faults, archive
        writes, and ``completed_per_min`` (jobs completed a minute over the last
        minute: :class:`~broker.service.served_queue.RecentRate`). Raises
        ``UnknownQueue`` for a queue that does not exist."""
        out: dict[str, Any] = await self._read(queue, ReadStats())
        q = self._queues.get(queue)
        loop_stats = q.loop.stats if q is not None and q.loop.active else None
        out["queue"] = queue
        out["served_by_this_broker"] = loop_stats is not None
        if q is not None and loop_stats is not None:
            out["completed_per_min"] = q.completions.per_min(self.monotonic())
            out["state_bytes"] = loop_stats.state_bytes
            out["commits"] = loop_stats.commits
            out["conflicts"] = loop_stats.conflicts
            out["unknown_outcomes"] = loop_stats.unknown_outcomes
            out["last_commit_ms"] = round(loop_stats.last_commit_s * 1000, 3)
            out["fault"] = q.loop.fault
            out["archive_writes_pending"] = q.archiver.pending()
            out["archive_error"] = q.archiver.last_error
        return out

    async def job(self: _Broker, queue: str, job_id: str) -> dict[str, Any]:
        """Job ``job_id`` of ``queue``, wherever it is: head, segments, archive
        (see :mod:`broker.service.lookup`, which states the cost). Raises
        ``InvalidRequest``, ``UnknownQueue`` or ``JobNotFound``. Reads only."""
        lookup.check_id(job_id)
        q = self._queues.get(queue)
        view: Callable[[], Awaitable[lookup.View]]
        if q is not None and q.loop.active:
            view = functools.partial(q.read, Inspect("lookup", (queue, job_id)))
        else:
            paths.check_queue_name(queue)
            view = functools.partial(lookup.stored, functools.partial(self.read_object, queue),
                                     queue, job_id, self.segments, self.clock())
        return await lookup.find(view, self.store, self._io, queue, job_id)

    async def archived(self: _Broker, queue: str, job_id: str) -> archive.Found | None:
        """Job ``job_id`` in the archive of ``queue``, or None (the cost:
        :func:`broker.model.format.archive.find_job`). Raises ``InvalidRequest`` for a
        bad id and the store's errors."""
        seq = lookup.check_id(job_id)
        paths.check_queue_name(queue)
        found: archive.Found | None = await self._io(archive.find_job, self.store, queue, seq)
        return found
