"""Staged chunks this broker checked, kept in memory until their publish.

A Spark write stages its chunks through the broker and publishes them a few
seconds later through the same broker, so the publish can take the jobs
parsed at stage time instead of reading and parsing every staging object
again. A write id may be staged again (through another broker, say), so an
entry carries the etag its put returned, and is used only while the object's
etag (a cheap ``head``) is still that; the store stays the truth, and a chunk
not in the cache (evicted, replaced, or staged through another broker) is
read from it. Bounded by bytes; the oldest entries go first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from broker.model.checks import StagedChunk

Entry = tuple[StagedChunk, int, str]  # chunk, bytes, etag


class StagedCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Entry] = OrderedDict()
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
