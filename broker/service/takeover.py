"""Watching the queues this broker does not serve, and taking them over.

The policy (when a queue may be taken, how often to look, what a lease is)
is :mod:`broker.service.ownership`'s; this module does the looking: it loads every
queue at start, lists the store for new queues every
:data:`~broker.service.ownership.RELIST_S`, ``head``\\ s each watched queue every
:data:`~broker.service.ownership.WATCH_INTERVAL_S` (the broker's periodic task runs
:meth:`Takeover.watch`), reads an object whole only when the policy says it
is worth it, and takes a queue over with a commit that writes this broker's
record. Start-up is two parts: :meth:`Takeover.load` only reads (retried
through transient storage errors: :mod:`broker.service.startup`) and
:meth:`Takeover.take_all` writes. It also decides, for a request, whether this broker may serve a
queue it does not serve yet (:meth:`Takeover.admit`).

The queues themselves (their commit loops, archivers and locks) belong to the
:class:`~broker.service.broker.Broker`, reached through :class:`Host`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from broker import paths
from broker.errors import NotFound, NotTheBroker, OsqueueError
from broker.model import state as S
from broker.model.ops import Reclaim
from broker.service.ownership import RELIST_S, Ownership
from broker.service.served_queue import ServedQueue
from broker.storage import ObjectStore

log = logging.getLogger("osqueue.broker")


class Host(Protocol):
    """What the takeover needs of the broker that owns the queues."""

    @property
    def stopping(self) -> bool: ...

    def served(self, name: str) -> ServedQueue | None:
        """The queue if this broker serves it now (its loop is active)."""
        ...

    def make_queue(self, name: str) -> ServedQueue:
        """The queue's loop and archiver: the one there is, or a new one."""
        ...

    def forget_queue(self, name: str) -> None:
        """Drop a queue made for loading that this broker does not serve."""
        ...

    def lock(self, name: str) -> asyncio.Lock:
        """The lock held while deciding who serves ``name`` (one a queue)."""
        ...

    async def read_object(self, name: str) -> tuple[S.QueueState, str] | None: ...


def existing_queue_names(store: ObjectStore) -> list[str]:
    """The queues ``store`` holds an object for (blocking: one ``list``)."""
    names = []
    for key in store.list(""):
        name = paths.queue_from_state_key(key)
        if name is not None:
            names.append(name)
    return names


class Takeover:
    """What one broker knows of the store's queues, and its takeovers."""

    def __init__(self, host: Host, store: ObjectStore, ownership: Ownership, *,
                 io: Callable[..., Awaitable[Any]], monotonic: Callable[[], float]) -> None:
        self.host = host
        self.store = store
        self.ownership = ownership
        self._io = io
        self._monotonic = monotonic
        self.known: set[str] = set()  # queues in the store, served or watched
        self._listed_at = 0.0

    async def load(self, deadline: float | None = None) -> tuple[list[ServedQueue], int]:
        """Start-up's reading part: list the store and load every existing queue
        object; returns (the queues no live broker owns, to take over; how many
        queues exist). The others are watched. Reads only: nothing is written.

        Raises a ``StateError`` (naming the object) if any queue object is
        corrupt, foreign or newer, and what storage raised if listing fails or
        reading an object keeps failing until ``deadline`` (``time.monotonic()``
        seconds; default the commit timeout). A raise leaves nothing behind: the
        queues made for loading are forgotten, so the whole load may be repeated.
        """
        names = await self._io(existing_queue_names, self.store)
        self._listed_at = self._monotonic()
        mine: list[ServedQueue] = []
        try:
            for name in names:
                q = self.host.make_queue(name)
                mine.append(q)
                state = await q.loop.load(deadline)  # raises StateError before any write
                self.known.add(name)
                self.ownership.observe(name, etag=q.loop.etag, record=state.broker)
                if not self.ownership.may_take(name, state.broker):
                    mine.pop()
                    self.host.forget_queue(name)  # watched, not served: no loop
        except BaseException:
            for q in mine:  # (none of them is started: no loop runs, nothing was written)
                self.host.forget_queue(q.name)
            raise
        return mine, len(names)

    async def take_all(self, mine: list[ServedQueue]) -> int:
        """Start-up's writing part: take the queues :meth:`load` found over (write
        our record, re-lease claimed jobs); returns how many this broker serves.
        Never raises for storage: a takeover whose commit failed is logged and
        its queue stays served, its loop retrying as after any failed batch
        (transient errors never make a broker abdicate); a queue another broker
        won meanwhile is watched instead."""
        await asyncio.gather(*(self.take_over(q) for q in mine))
        return sum(q.loop.active for q in mine)

    async def take_over(self, q: ServedQueue) -> bool:
        """Make ``q`` ours (a commit that writes our record); False if another
        broker turned out to own it."""
        if not q.loop.active:
            q.loop.reactivate()
        q.loop.start()
        self.known.add(q.name)
        try:
            await q.loop.submit(Reclaim())  # housekeeping carries the takeover
        except NotTheBroker as exc:
            log.info("queue %s: %s; watching it", q.name, exc)
            return False
        except OsqueueError as exc:
            log.warning("queue %s: taking it over failed for now (%s)", q.name, exc)
            return False
        self.ownership.forget(q.name)
        log.info("queue %s: this broker serves it now", q.name)
        return True

    async def admit(self, name: str) -> bool:
        """Whether this broker may serve ``name``, which it does not serve now:
        True if its object exists and no live broker owns it, False if it has
        no object. Raises ``NotTheBroker`` (with the owner's URL) if a live
        broker owns it. Call with ``host.lock(name)`` held."""
        got = await self.host.read_object(name)
        if got is None:
            return False
        state, etag = got
        self.ownership.observe(name, etag=etag, record=state.broker)
        if not self.ownership.may_take(name, state.broker):
            self.known.add(name)
            assert state.broker is not None
            raise NotTheBroker(f"this broker does not serve queue {name!r}; "
                               f"it is served by {state.broker.url}",
                               url=state.broker.url, queue=name)
        return True

    def _serves(self, name: str) -> bool:
        """Whether this broker serves ``name`` and has written it: a loop made for
        a refused first push, never written (``missing``), is watched, for another
        broker may create the queue, and die."""
        q = self.host.served(name)
        return q is not None and not q.missing()

    async def watch(self) -> None:
        """One round of watching the queues this broker does not serve: a cheap
        ``head`` each; take over those whose owner is gone (see
        :mod:`broker.service.ownership`)."""
        host = self.host
        if host.stopping:
            return
        if self._monotonic() - self._listed_at >= RELIST_S:
            self.known.update(await self._io(existing_queue_names, self.store))
            self._listed_at = self._monotonic()
        for name in sorted(self.known):
            if host.stopping or self._serves(name):
                continue
            try:
                etag = await self._io(self.store.head, paths.state_key(name))
            except NotFound:
                self.known.discard(name)
                self.ownership.forget(name)
                continue
            except OsqueueError as exc:
                log.debug("watch of %s failed: %s", name, exc)
                continue
            self.ownership.observe(name, etag=etag)
            log.debug("watch %s: etag %s, quiet for %.1fs (lease %s)", name, etag[-8:],
                      self.ownership.quiet_for(name), self.ownership.lease_s(name))
            if not self.ownership.worth_reading(name):
                continue  # the owner wrote within its lease: alive
            async with host.lock(name):
                if host.stopping or self._serves(name):
                    continue  # a request made it ours meanwhile
                try:
                    got = await host.read_object(name)
                except OsqueueError as exc:
                    log.warning("watch of %s: cannot read it (%s)", name, exc)
                    continue
                if got is None:
                    continue
                state, etag = got
                if (unwritten := host.served(name)) is not None:
                    unwritten.yield_to(state)
                self.ownership.observe(name, etag=etag, record=state.broker)
                if not self.ownership.may_take(name, state.broker):
                    continue
                log.warning("queue %s: its broker %s is gone; taking it over", name,
                            state.broker.id if state.broker else "(none)")
                q = host.make_queue(name)
                q.loop.reactivate()
                q.loop.start()
            await self.take_over(q)
