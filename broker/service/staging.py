"""Staged writes (Spark's exactly-once enqueue): stage, publish, sweep.

A task stages a chunk of jobs as its own immutable object (no CAS, no
commit: staging costs nothing in the queue object). The driver's publish
reads the chunks of the successful attempts and pushes them in ONE commit,
marked with a "once" key so a repeated publish adds nothing; then every
staging object of the write is deleted. Objects of a writer that vanished
are swept once this broker has seen them for the queue's ``staged_ttl_s``,
timed on its own monotonic clock.

:class:`Staging` owns the staging objects and the :class:`StagedCache` of
chunks checked at stage time; the commit itself is the caller's (the
:class:`broker.service.broker.Broker` hands it a ``commit`` coroutine), so this
module knows nothing of queue ownership or the commit loop.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

from broker import paths
from broker.errors import InvalidRequest, NotFound, OsqueueError, shown
from broker.model.checks import StagedChunk, parse_staged_chunk
from broker.model.ops import Result
from broker.storage import ObjectStore
from broker.storage.base import ListedKeys

log = logging.getLogger("osqueue.broker")

#: How often staging objects of vanished Spark writers (and unreferenced segment
#: objects) are swept by default, s (``BrokerConfig.sweep_s``).
SWEEP_S = 60.0

#: Runs a blocking storage call off the event loop: ``await io(fn, *args)``.
IO = Callable[..., Awaitable[Any]]
#: Pushes the jobs of a publish: ``await commit(loads, missing)``, each of
#: ``loads`` reading one chunk to keep (None if it is gone by then), ``missing``
#: counting chunks to keep that were not found; raises what the push raises.
Commit = Callable[[list[Callable[[], Awaitable[StagedChunk | None]]], int], Awaitable[Result]]


_Entry = tuple[StagedChunk, int, str]  # chunk, bytes, etag


class StagedCache:
    """Staged chunks this broker checked, kept in memory until their publish.

    A Spark write stages its chunks through the broker and publishes them a few
    seconds later through the same broker, so the publish can take the jobs
    parsed at stage time instead of reading and parsing every staging object
    again. A write id may be staged again (through another broker, say), so an
    entry carries the etag its put returned, and is used only while the object's
    etag (a cheap ``head``) is still that; the store stays the truth, and a chunk
    not in the cache (evicted, replaced, or staged through another broker) is
    read from it. Bounded by ``max_bytes`` (of the chunks' staged lines); the
    oldest entries go first.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, key: str, chunk: StagedChunk, size: int, etag: str) -> None:
        """Keep ``chunk`` (parsed from ``size`` bytes, the object's version
        ``etag``) for ``key``, evicting the oldest."""
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:  # the same write id staged again: it replaces
                self._bytes -= old[1]
            self._entries[key] = (chunk, size, etag)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped, _) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def pop(self, key: str) -> tuple[StagedChunk, str] | None:
        """(chunk, etag) of ``key`` if cached (removing them), else None."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self._bytes -= entry[1]
            return entry[0], entry[2]

    def discard(self, key: str) -> None:
        self.pop(key)


class Staging:
    """The staging objects of one store, seen from one broker.

    ``io`` runs a blocking store call in the broker's I/O threads;
    ``max_payload_bytes`` bounds a staged payload (the broker's default queue
    setting: a chunk is checked before its queue is known to exist).
    """

    def __init__(self, store: ObjectStore, io: IO, bulk: IO, *, cache_bytes: int,
                 max_payload_bytes: int, monotonic: Callable[[], float]) -> None:
        self.store = store
        self._io = io
        self._bulk = bulk  # io with the garbage collector paused: parsing chunks
        self._max_payload_bytes = max_payload_bytes
        self._monotonic = monotonic
        self._cache = StagedCache(cache_bytes)
        self._seen: dict[str, float] = {}  # staging key -> first listed (monotonic)
        self._listed = ListedKeys("staging object", log)  # skips keys no store call takes

    # -- stage ------------------------------------------------------------------------
    async def stage(self, queue: str, write_id: str, lines: bytes) -> int:
        """Store staged lines (see :mod:`broker.wire`) as one staging object; return
        how many jobs they hold. Staging a write id again replaces what it held
        (one object a write id: the last put wins). Raises ``InvalidRequest`` or
        ``PayloadTooLarge`` (storing nothing) if any line is bad."""
        paths.check_queue_name(queue)
        paths.check_write_id(write_id)
        key = paths.staging_key(queue, write_id)
        count = await self._io(self._check_and_put, key, lines)
        return int(count)

    def _check_and_put(self, key: str, lines: bytes) -> int:
        chunk = parse_staged_chunk(lines, check=True, max_payload_bytes=self._max_payload_bytes)
        if not chunk.jobs:
            raise InvalidRequest("nothing to stage: no job lines")
        etag = self.store.put(key, lines)
        self._cache.put(key, chunk, len(lines), etag)
        return len(chunk.jobs)

    # -- publish ----------------------------------------------------------------------
    async def publish(self, queue: str, prefix: str, keep: list[str], once: str | None,
                      commit: Commit) -> dict[str, Any]:
        """Push the staged chunks ``keep`` with ``commit`` (one commit); drop every
        staging object under ``prefix``; return the publish's answer.

        Raises ``InvalidRequest`` (publishing and removing nothing) if a chunk to
        keep is missing and ``once`` is None (with ``once``, the push itself
        tells a repeat from a first publish, which may miss chunks a repeat
        already removed).
        """
        keep = list(dict.fromkeys(keep))  # a write id named twice is one chunk, pushed once
        newest, every = await self._io(self._objects, queue, prefix)
        result = None
        if keep:
            missing = [w for w in keep if w not in newest]
            if missing and once is None:
                raise InvalidRequest(f"{len(missing)} staged chunk(s) are missing, e.g. "
                                     f"{shown(missing[0])}; nothing was published")
            loads: list[Callable[[], Awaitable[StagedChunk | None]]] = [
                functools.partial(self._read, newest[w]) for w in keep if w in newest]
            result = await commit(loads, len(missing))
        try:
            await self._io(self._delete, every)
        except OsqueueError as exc:  # published all the same; the sweep removes them later
            log.warning("publish of %s%s: staging objects not removed yet (%s)",
                        queue, prefix, exc)
        published = len(result.ids) if result is not None else 0
        return {"published": published, "discarded": len(set(newest) - set(keep)),
                "duplicate": bool(result and result.duplicate)}

    def _objects(self, queue: str, prefix: str) -> tuple[dict[str, str], list[str]]:
        """(write id -> its staging object, every staging object) under ``prefix``."""
        found: dict[str, str] = {}
        every = []
        for key in self.store.list(paths.staging_prefix(queue) + prefix):
            write_id = paths.parse_staging_key(queue, key)
            if write_id is None or not self._listed.usable(key):
                continue
            every.append(key)
            if write_id not in found or key == paths.staging_key(queue, write_id):
                found[write_id] = key  # (this version's key over an 0.1 one)
        return found, every

    async def _read(self, key: str) -> StagedChunk | None:
        """The jobs of a staging object, or None if it is gone (published meanwhile).
        Only the parse runs with the collector paused, not the store calls."""
        got = await self._io(self._fetch, key)
        if not isinstance(got, bytes):
            return got
        return cast("StagedChunk", await self._bulk(
            functools.partial(parse_staged_chunk, check=False, where=key), got))

    def _fetch(self, key: str) -> StagedChunk | bytes | None:
        """A staging object's jobs if this broker still holds them parsed, else its
        bytes, or None if it is gone."""
        cached = self._cache.pop(key)
        try:
            if cached is not None and self.store.head(key) == cached[1]:
                # Still the version this broker staged. On a store whose etags are
                # content hashes (see ObjectStore.etags_differ_on_same_bytes) an
                # equal etag means equal bytes, which parse to the same jobs.
                return cached[0]
            return self.store.get(key)
        except NotFound:
            return None

    def _delete(self, keys_: list[str]) -> None:
        for key in keys_:
            self._cache.discard(key)
            self.store.delete(key)

    # -- sweep ------------------------------------------------------------------------
    async def sweep(self, queues: Iterable[tuple[str, float]]) -> int:
        """Delete the staging objects of ``queues`` (name, staged_ttl_s) that this
        broker has seen for longer than that ttl (timed on its own monotonic
        clock from the first sweep that listed them); return how many."""
        now = self._monotonic()
        removed = 0
        listed_now: set[str] = set()
        for name, ttl_s in queues:
            listed = await self._io(self.store.list, paths.staging_prefix(name))
            for key in listed:
                if paths.parse_staging_key(name, key) is None or not self._listed.usable(key):
                    continue
                listed_now.add(key)
                first_seen = self._seen.setdefault(key, now)
                if now - first_seen >= ttl_s:
                    await self._io(self._delete, [key])
                    listed_now.discard(key)
                    removed += 1
        self._seen = {k: t for k, t in self._seen.items() if k in listed_now}
        if removed:
            log.info("swept %d staging object(s) of vanished writers", removed)
        return removed
