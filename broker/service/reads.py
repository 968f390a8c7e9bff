"""A broker's reads: a queue's stats, pages of its jobs, one job by id wherever
it is, its stored object. The :class:`Broker <broker.service.broker.Broker>`'s
read calls are these (it holds one :class:`Reads`); the takeover and the
dashboard read stored objects through it too.

A read never moves a queue: on the broker serving it, it goes through the
queue's loop (so it sees committed state only, never a batch whose write is in
flight); anywhere else it is answered from the stored object (see
:mod:`broker.service.stored_view` and :mod:`broker.service.lookup`), and
nothing is taken over or created.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from broker import paths
from broker.errors import NotFound
from broker.model import tokens as token_tags
from broker.model.format import archive
from broker.model.format.decode import decode_state
from broker.model.ops import Inspect, ReadJobs, ReadStats
from broker.model.state import QueueState
from broker.service import lookup
from broker.service.job_pages import full_page
from broker.service.segment_store import SegmentStore
from broker.service.served_queue import ServedQueue
from broker.service.stored_view import stored_view
from broker.storage import ObjectStore

#: Runs a store call (or a parse) off the event loop: ``await call(fn, *args)``.
OffLoop = Callable[..., Awaitable[Any]]


class Reads:
    """The reads of one broker over ``store``. ``served(name)``: the queue if this
    broker serves it now, else None; ``io`` runs a store call off the event loop,
    ``bulk`` a parse; ``clock`` gives the time (ms), ``monotonic`` seconds."""

    def __init__(self, store: ObjectStore, served: Callable[[str], ServedQueue | None],
                 segments: SegmentStore, io: OffLoop, bulk: OffLoop, *,
                 clock: Callable[[], int], monotonic: Callable[[], float]) -> None:
        self.store = store
        self.served = served
        self.segments = segments
        self._io = io
        self._bulk = bulk
        self.clock = clock
        self.monotonic = monotonic

    async def read_object(self, name: str) -> tuple[QueueState, str] | None:
        """The stored state of ``name`` and its etag, or None if it does not exist.
        Raises the store's errors, and ``StateError`` for an object that does not decode."""
        try:
            got = await self._io(self.store.read, paths.state_key(name))
        except NotFound:
            return None
        where = f"{self.store.url}/{paths.state_key(name)}"
        state = await self._bulk(functools.partial(decode_state, where=where), got.data)
        token_tags.bind(state, name, None)  # a read invents no key: an older object shows no tokens
        return state, got.etag

    async def read(self, queue: str, op: ReadStats | ReadJobs) -> Any:
        """``op`` answered through the queue's loop if this broker serves it, else
        from the stored object. Raises ``UnknownQueue`` for a queue with no object."""
        q = self.served(queue)
        if q is not None and not q.missing():
            return await q.read(op)
        paths.check_queue_name(queue)  # (never written here: the store tells)
        return await stored_view(functools.partial(self.read_object, queue), queue, op,
                                 self.segments, self.clock())

    async def jobs(self, queue: str, status: str | None = None, limit: int = 100,
                   after: str | None = None, *, raw: bool = False,
                   tokens: bool = False) -> list[dict[str, Any]]:
        """A page of jobs as plain dicts. ``raw``: payloads and results stay their
        stored JSON bytes (``orjson.Fragment``), passed through verbatim;
        ``tokens``: leases show their tokens (usable: see :class:`ReadJobs`).
        Full (``limit`` jobs) unless it is the last (see :mod:`.job_pages`)."""
        return await full_page(functools.partial(self.read, queue),
                               ReadJobs(status, limit, after, raw, tokens))

    async def stats(self, queue: str) -> dict[str, Any]:
        """Counts and figures of ``queue`` (:func:`broker.model.views.stats`); on
        the broker serving it also this broker's: its commits, faults, archive
        writes, and ``completed_per_min`` (jobs completed a minute over the last
        minute: :class:`~broker.service.served_queue.RecentRate`). Raises
        ``UnknownQueue`` for a queue that does not exist."""
        out: dict[str, Any] = await self.read(queue, ReadStats())
        q = self.served(queue)
        loop_stats = q.loop.stats if q is not None else None
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

    async def job(self, queue: str, job_id: str) -> dict[str, Any]:
        """Job ``job_id`` of ``queue``, wherever it is: head, segments, archive
        (see :mod:`broker.service.lookup`, which states the cost). Raises
        ``InvalidRequest``, ``UnknownQueue`` or ``JobNotFound``. Reads only."""
        lookup.check_id(job_id)
        q = self.served(queue)
        view: Callable[[], Awaitable[lookup.View]]
        if q is not None:
            view = functools.partial(q.read, Inspect("lookup", (queue, job_id)))
        else:
            paths.check_queue_name(queue)
            view = functools.partial(lookup.stored, functools.partial(self.read_object, queue),
                                     queue, job_id, self.segments, self.clock())
        return await lookup.find(view, self.store, self._io, queue, job_id)

    async def archived(self, queue: str, job_id: str) -> archive.Found | None:
        """Job ``job_id`` in the archive of ``queue``, or None (the cost:
        :func:`broker.model.format.archive.find_job`). Raises ``InvalidRequest`` for a
        bad id and the store's errors."""
        seq = lookup.check_id(job_id)
        paths.check_queue_name(queue)
        found: archive.Found | None = await self._io(archive.find_job, self.store, queue, seq)
        return found
