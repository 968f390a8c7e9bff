"""What the broker benchmarks measure inside a broker's process: the bytes a store is
written (and the queue object's size), and the process's memory. Shared by
depth_bench and bad_deploy_bench."""

from __future__ import annotations

import ctypes
import resource
import sys
import threading
import time
from pathlib import Path

from broker import paths
from broker.storage import Data, ObjectStore, Versioned, data_len


class CountingStore(ObjectStore):
    """Passes every call to ``inner``; adds up the bytes of the writes
    (``write_if_match``, ``create_if_absent``, ``put``) and keeps the size of the
    last version written of ``queue``'s object (``head_bytes``) and the largest
    (``max_head_bytes``). Thread-safe (the broker writes from its I/O threads)."""

    def __init__(self, inner: ObjectStore, queue: str) -> None:
        self.inner = inner
        self.url = inner.url
        self.written = 0
        self.head_bytes = 0
        self.max_head_bytes = 0
        self._state_key = paths.state_key(queue)
        self._lock = threading.Lock()

    def _count(self, key: str, n: int) -> None:
        with self._lock:
            self.written += n
            if key == self._state_key:
                self.head_bytes = n
                self.max_head_bytes = max(self.max_head_bytes, n)

    def read(self, key: str) -> Versioned:
        return self.inner.read(key)

    def head(self, key: str) -> str:
        return self.inner.head(key)

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        etag = self.inner.write_if_match(key, data, etag)
        self._count(key, data_len(data))
        return etag

    def create_if_absent(self, key: str, data: Data) -> str:
        etag = self.inner.create_if_absent(key, data)
        self._count(key, data_len(data))
        return etag

    def put(self, key: str, data: bytes) -> str:
        etag = self.inner.put(key, data)
        self._count(key, len(data))
        return etag

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def close(self) -> None:
        self.inner.close()


def rss_bytes() -> int:
    """VmRSS of this process from /proc/self/status, in bytes (0 where absent)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def trimmed_rss_bytes() -> int | None:
    """VmRSS (bytes) after glibc's ``malloc_trim(0)`` handed freed heap back to the
    system: the memory the process still uses, without what the allocator keeps
    after a burst (None where there is no glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return None
    return rss_bytes()


def peak_rss_bytes() -> int:
    """``ru_maxrss`` of this process, in bytes (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def progress(what: str) -> None:
    """A progress line on stderr, with the time."""
    print(f"  [{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)
