"""The file store's file-level parts: writing a file whole, syncing a directory,
reaping replaced versions off the caller's thread, and per-thread locks.

Used only by :mod:`broker.storage.files`; an ``OSError`` here is turned into
``StorageUnavailable`` or ``StorageRefused`` (naming the errno) by :func:`disk_error`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

from broker.errors import StorageRefused, StorageUnavailable
from broker.storage.base import Data


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: Errors a retry will not cure: the file store's "access denied" (a directory it
#: may not write or read, a read-only filesystem).
DENIED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def disk_error(exc: OSError, action: str, key: str, url: str, *,
               may_refuse: bool = True) -> StorageUnavailable | StorageRefused:
    """``exc`` as the store's error: ``StorageRefused`` for a :data:`DENIED` errno
    (nothing was written: only with ``may_refuse``, for a call that cannot have
    landed), else ``StorageUnavailable`` (transient; a write's outcome unknown)."""
    code = exc.errno or 0
    name = errno.errorcode.get(code, f"errno {code}") if code else type(exc).__name__
    reason = exc.strerror or str(exc)
    if may_refuse and code in DENIED:
        return StorageRefused(f"local disk refused {action} {key!r} in {url}: {name} "
                              f"({reason}); check the directory's owner and permissions, "
                              "and that its filesystem is writable")
    return StorageUnavailable(f"local disk error {name} {action} {key!r} in {url}: {reason}")


def missing_dir_is_empty(exc: OSError) -> None:
    """``os.walk`` error hook: a missing directory has no keys; anything else fails."""
    if not isinstance(exc, FileNotFoundError | NotADirectoryError):
        raise exc


_IOV_MAX = 1024


def plain_etag(st: os.stat_result) -> str:
    """The etag of a plain file: its identity (a replaced file is a new inode)."""
    return f"f-{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"


class Reaper:
    """Deletes superseded version files in a background thread.

    Unlinking a large version file costs about as much as writing it, and a
    commit's caller need not wait for it. A version file left behind by a
    crash is harmless: nothing points at it.
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[Path] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget_thread)

    def _forget_thread(self) -> None:
        self._thread = None  # a forked child has no copy of the thread
        self._lock = threading.Lock()
        self._queue = queue.Queue()

    def add(self, path: Path) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="osqueue-reaper",
                                                daemon=True)
                self._thread.start()
        self._queue.put(path)

    def _run(self) -> None:
        while True:
            path = self._queue.get()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            self._queue.task_done()

    def wait(self) -> None:
        """Return once every file handed over so far is deleted."""
        if self._thread is not None:
            self._queue.join()


#: The one reaper and the one set of thread locks of this process (shared by every store).
REAPER = Reaper()


def write_file(path: Path, data: Data, fsync: bool) -> None:
    """Write all of ``data`` (chunks via writev, no join), then fsync if asked."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        chunks = [data] if isinstance(data, bytes) else [c for c in data if c]
        i = 0
        while i < len(chunks):
            batch = chunks[i:i + _IOV_MAX]
            written = os.writev(fd, batch)
            for chunk in batch:  # account for a short write
                if written >= len(chunk):
                    written -= len(chunk)
                    i += 1
                else:
                    chunks[i] = chunk[written:]
                    break
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


class ThreadLocks:
    """One in-process lock per object path.

    Threads of this process queue on it (woken on release, no polling), so
    only one of them at a time polls the ``flock`` that excludes other
    processes. Entries are dropped when nobody uses them.
    """

    class _Entry:
        __slots__ = ("lock", "users")

        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.users = 0

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._entries: dict[Path, ThreadLocks._Entry] = {}
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        # A forked child has none of the parent's threads, so none of their locks.
        self._guard = threading.Lock()
        self._entries = {}

    @contextlib.contextmanager
    def hold(self, path: Path, timeout_s: float) -> Iterator[bool]:
        """Yield True holding ``path``'s lock, or False after ``timeout_s`` seconds."""
        with self._guard:
            entry = self._entries.setdefault(path, ThreadLocks._Entry())
            entry.users += 1
        got = entry.lock.acquire(timeout=max(timeout_s, 0.0))
        try:
            yield got
        finally:
            if got:
                entry.lock.release()
            with self._guard:
                entry.users -= 1
                if entry.users == 0 and self._entries.get(path) is entry:
                    del self._entries[path]


THREAD_LOCKS = ThreadLocks()
