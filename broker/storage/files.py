"""Local-file store: the embedded default.

A CAS object ``dir/name`` is a symbolic link to an immutable version file
``dir/.name.v-<etag>``. Replacing the link (``rename`` of a new link over it)
is atomic, so a reader always sees one whole version with its own etag, and
``jq . dir/name`` still works. Writers serialise on an ``flock`` of
``dir/.name.lock``, held across compare, write, fsync and rename, so the
compare-and-set is atomic across threads and processes. Each write makes a
fresh random etag, so the etag changes even when the bytes repeat.

Needs a POSIX filesystem with ``flock`` and symbolic links (a local disk, not
a FUSE mount of object storage: use ``s3://`` there).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import queue
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from broker.errors import Conflict, InvalidRequest, NotFound, StorageUnavailable
from broker.storage.base import Data, ObjectStore, Versioned

_VERSION_MARK = ".v-"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_IOV_MAX = 1024


class _Reaper:
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


_reaper = _Reaper()


def _write_file(path: Path, data: Data, fsync: bool) -> None:
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


class FileStore(ObjectStore):
    """CAS objects and plain objects under one local directory."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = f"file://{self.root}"
        self._fsync = fsync

    # -- paths -----------------------------------------------------------
    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise InvalidRequest(f"invalid object key {key!r}")
        if any(p.startswith(".") for p in parts):
            raise InvalidRequest(f"object key parts may not start with '.': {key!r}")
        return self.root.joinpath(*parts)

    @staticmethod
    def _version_name(path: Path, etag: str) -> str:
        return f".{path.name}{_VERSION_MARK}{etag}"

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _current(self, path: Path) -> tuple[str | None, Path | None]:
        """(etag, version file) of the object now, or (None, None) if absent."""
        try:
            target = os.readlink(path)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            # A plain file put there by hand (a restored backup, say): give it an
            # etag from its identity; the next write turns it into a link.
            st = path.stat()
            return f"f-{st.st_ino}-{st.st_mtime_ns}-{st.st_size}", None
        _, _, etag = target.rpartition(_VERSION_MARK)
        return etag, path.parent / target

    def _swap(self, path: Path, data: Data, old_version: Path | None) -> str:
        etag = uuid.uuid4().hex
        version = path.parent / self._version_name(path, etag)
        _write_file(version, data, self._fsync)
        tmp_link = path.parent / f".{path.name}.link-{etag}"
        os.symlink(version.name, tmp_link)
        os.replace(tmp_link, path)
        if self._fsync:
            _fsync_dir(path.parent)
        if old_version is not None:
            _reaper.add(old_version)
        return etag

    def settle(self) -> None:
        """Wait until superseded version files are deleted."""
        _reaper.wait()

    # -- CAS objects -----------------------------------------------------
    def read(self, key: str) -> Versioned:
        path = self._path(key)
        for _ in range(100):
            etag, version = self._current(path)
            if etag is None:
                raise NotFound(f"no object {key!r} in {self.url}")
            try:
                data = (version or path).read_bytes()
            except FileNotFoundError:
                continue  # replaced between readlink and open: look again
            return Versioned(data, etag)
        raise StorageUnavailable(f"object {key!r} kept changing while being read")

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        path = self._path(key)
        with self._locked(path):
            current, version = self._current(path)
            if current is None or current != etag:
                raise Conflict(f"object {key!r} changed since it was read")
            return self._swap(path, data, version)

    def create_if_absent(self, key: str, data: Data) -> str:
        path = self._path(key)
        with self._locked(path):
            if os.path.lexists(path):
                raise Conflict(f"object {key!r} already exists")
            return self._swap(path, data, None)

    # -- plain objects ---------------------------------------------------
    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex}"
        _write_file(tmp, data, self._fsync)
        os.replace(tmp, path)
        if self._fsync:
            _fsync_dir(path.parent)

    def get(self, key: str) -> bytes:
        return self.read(key).data

    def list(self, prefix: str) -> list[str]:
        base, _, _ = prefix.rpartition("/")
        start = self.root.joinpath(*base.split("/")) if base else self.root
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                if name.startswith("."):
                    continue
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
            # symlinks to version files are listed by os.walk as files already
        return sorted(keys)

    def delete(self, key: str) -> None:
        path = self._path(key)
        if not path.is_symlink():  # a plain object (put): one unlink, no lock file left over
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        with self._locked(path):
            _, version = self._current(path)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            if version is not None:
                with contextlib.suppress(FileNotFoundError):
                    version.unlink()
