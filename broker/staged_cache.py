"""Staged chunks this broker checked, kept in memory until their publish.

A Spark write stages its chunks through the broker and publishes them a few
seconds later through the same broker, so the publish can take the jobs
parsed at stage time instead of reading and parsing every staging object
again. Staging objects are immutable (each key is written once), so a cached
entry is never stale; the store stays the truth for which chunks exist, and a
chunk not in the cache (evicted, or staged through another broker) is read
from the store. Bounded by bytes; the oldest entries go first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from broker.transitions import NewJob

Jobs = list[NewJob | bytes]


class StagedCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[Jobs, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, key: str, jobs: Jobs, size: int) -> None:
        """Keep ``jobs`` (parsed from ``size`` bytes) for ``key``, evicting the oldest."""
        if size > self.max_bytes:
            return
        with self._lock:
            self._entries[key] = (jobs, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def pop(self, key: str) -> Jobs | None:
        """The jobs of ``key`` if cached (removing them), else None."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self._bytes -= entry[1]
            return entry[0]

    def discard(self, key: str) -> None:
        self.pop(key)
