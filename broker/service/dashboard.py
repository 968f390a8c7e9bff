"""What the dashboard (:mod:`broker.http.ui`) reads of a broker's queues.

Reads of a queue this broker serves go through its commit loop as
:class:`~broker.model.ops.Inspect` ops (views of :mod:`broker.model.browse`:
committed state only, each cheap at a million jobs). A queue another broker
serves (or none, for the moment) is read from the store: its summary only,
kept for ``standby_ttl_s`` and refreshed in the background, so a page never
waits on reading a deep queue's object that another broker owns (the jobs of
such a queue are browsed on its owner's dashboard). A read never moves a
queue and never creates one.

The dashboard's actions are not here: they call the broker's own operations
(:meth:`Broker.redrive`, :meth:`Broker.purge`, :meth:`Broker.set_paused`),
the very calls the HTTP API makes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker import paths
from broker.errors import NotTheBroker, OsqueueError, UnknownQueue
from broker.model import browse
from broker.model.ops import Inspect
from broker.service.broker import Broker
from broker.service.history import History
from broker.service.job_pages import full_browse_page

log = logging.getLogger("osqueue.dashboard")


@dataclass
class _Standby:
    """The last summary read of a queue another broker serves."""

    summary: dict[str, Any] | None
    read_at: float  # monotonic
    error: str | None = None


class Dashboard:
    """The dashboard's reads of ``broker``'s queues (see the module docstring)."""

    def __init__(self, broker: Broker, history: History, *, standby_ttl_s: float = 30.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.broker = broker
        self.history = history
        self.standby_ttl_s = standby_ttl_s
        self._monotonic = monotonic
        self._standby: dict[str, _Standby] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}

    async def view(self, queue: str, name: str, *args: Any) -> Any:
        """The view ``name`` of :mod:`broker.model.browse` of a queue this broker
        serves; a ``page`` is full unless it is the last before either end
        (read in steps over a deep queue: see :mod:`broker.service.job_pages`).
        Raises ``UnknownQueue`` if it has no object, ``NotTheBroker`` if this
        broker does not serve it (see :meth:`standby`), and what the loop
        raises."""
        q = self.broker.served(queue)
        if q is None:
            paths.check_queue_name(queue)
            url = self.owner_url(queue)
            raise NotTheBroker(f"this broker does not serve queue {queue!r} (now)",
                               **({"url": url} if url else {}))
        if name == "page":
            async def step(part: tuple[Any, ...]) -> dict[str, Any]:
                got: dict[str, Any] = await q.read(Inspect(name, part))
                return got
            return await full_browse_page(step, *args)
        return await q.read(Inspect(name, args))

    async def archived(self, queue: str, job_id: str) -> dict[str, Any] | None:
        """Job ``job_id`` from the archive of ``queue``, as the ``job`` view shows
        one (:func:`broker.model.browse.archived`), or None: a finished job that
        left the queue object. Raises ``InvalidRequest`` for a bad id."""
        found = await self.broker.archived(queue, job_id)
        return None if found is None else browse.archived(found)

    def serves(self, queue: str) -> bool:
        return self.broker.served(queue) is not None

    async def summary(self, queue: str) -> dict[str, Any]:
        """What the dashboard shows of a queue: ``queue``; ``served`` (by this
        broker); ``s``, its summary (:func:`broker.model.browse.summary`; None
        until a queue served elsewhere was read); ``as_of_s``, how old ``s`` is;
        ``commits_per_s`` and ``completed_per_s`` (over the last minute of this
        broker's samples; None elsewhere, or before two samples); ``error``, why
        the last read failed (None if it did not)."""
        q = self.broker.served(queue)
        if q is not None:
            return {"queue": queue, "served": True, "s": await self.view(queue, "summary"),
                    "as_of_s": 0.0, "error": None,
                    "commits_per_s": self.history.commit_rate(queue, q.loop.stats.commits),
                    "completed_per_s": self.history.total_rate(queue, "completed")}
        paths.check_queue_name(queue)
        if queue not in self._standby and queue not in self.broker.queue_names():
            await self._refresh(queue)  # one this broker has not listed (yet): look once
            if queue not in self._standby:
                raise UnknownQueue(f"queue {queue!r} does not exist "
                                   "(it is created by its first push)")
        return self.standby(queue)

    async def groups(self, queue: str) -> dict[str, Any] | None:
        """The job groups of a queue this broker serves, as its stats answer them
        (:meth:`Broker.stats`: the same read as ``GET /v1/queues/{queue}/stats``):
        ``settings``, the group settings set (``group_limit``...), and ``groups``,
        the stats' ``groups`` block. None for a queue that uses no groups, or that
        this broker does not serve (its owner's dashboard shows them: a read here
        would fetch its object). Raises ``UnknownQueue`` and what the loop raises."""
        if self.broker.served(queue) is None:
            return None
        stats = await self.broker.stats(queue)
        block = stats.get("groups")
        if block is None:
            return None
        settings = {k: v for k, v in stats["settings"].items() if k.startswith("group_")}
        return {"settings": settings, "groups": block}

    async def about(self, queue: str) -> dict[str, Any]:
        """:meth:`summary` without the counts for a queue served here (``s`` is
        None): whether it is served here, and for one served elsewhere what is
        known of it. For a page that shows no counts (a job's)."""
        if self.broker.served(queue) is None:
            return await self.summary(queue)
        return {"queue": queue, "served": True, "s": None, "as_of_s": 0.0, "error": None,
                "commits_per_s": None, "completed_per_s": None}

    def standby(self, queue: str) -> dict[str, Any]:
        """:meth:`summary` of a queue this broker does not serve, without waiting:
        the last summary read of its object; a new read is started when there
        is none or it is older than ``standby_ttl_s``."""
        now = self._monotonic()
        seen = self._standby.get(queue)
        if (seen is None or now - seen.read_at >= self.standby_ttl_s) and \
                queue not in self._refreshing:
            self._refreshing[queue] = asyncio.get_running_loop().create_task(
                self._refresh(queue), name=f"dashboard read {queue}")
        return {"queue": queue, "served": False, "s": None if seen is None else seen.summary,
                "as_of_s": None if seen is None else round(now - seen.read_at, 1),
                "error": None if seen is None else seen.error, "commits_per_s": None,
                "completed_per_s": None}

    async def wait_standby(self, queue: str) -> None:
        """Wait for a background read of ``queue`` under way, if any (tests)."""
        task = self._refreshing.get(queue)
        if task is not None:
            await asyncio.wait([task])

    async def _refresh(self, queue: str) -> None:
        try:
            got = await self.broker.read_object(queue)
            if got is None:
                self._standby.pop(queue, None)
                return
            summary = browse.summary(got[0], self.broker.clock())
            self._standby[queue] = _Standby(summary, self._monotonic())
        except OsqueueError as exc:
            log.warning("dashboard: cannot read queue %s (%s)", queue, exc.message)
            old = self._standby.get(queue)
            self._standby[queue] = _Standby(old.summary if old else None, self._monotonic(),
                                            exc.message)
        except Exception:  # a background read must not die unseen
            log.exception("dashboard: reading queue %s failed", queue)
        finally:
            self._refreshing.pop(queue, None)

    async def overview(self) -> list[dict[str, Any]]:
        """Every queue of the store (as this broker knows them), by name, each as
        :meth:`summary` gives it; a queue whose read fails says why in ``error``."""
        async def one(name: str) -> dict[str, Any]:
            try:
                return await self.summary(name)
            except OsqueueError as exc:
                return {"queue": name, "served": self.serves(name), "s": None,
                        "as_of_s": None, "error": exc.message, "commits_per_s": None,
                        "completed_per_s": None}

        names = self.broker.queue_names()
        for gone in set(self._standby) - set(names):  # left the store (or never listed)
            del self._standby[gone]
        return list(await asyncio.gather(*(one(n) for n in names)))

    def owner_url(self, queue: str) -> str | None:
        """The URL of the broker serving ``queue`` as last read, if another one."""
        seen = self._standby.get(queue)
        record = None if seen is None or seen.summary is None else seen.summary.get("broker")
        return None if record is None else record.get("url")
