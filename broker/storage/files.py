"""Local-file store: the embedded default.

A CAS object ``dir/name`` is a symbolic link to an immutable version file
``dir/.name.v-<etag>``. Replacing the link (``rename`` of a new link over it)
is atomic, so a reader always sees one whole version with its own etag, and
``jq . dir/name`` still works. Each write makes a fresh random etag, so the
etag changes even when the bytes repeat.

A write first writes and fsyncs its new version file (a unique hidden name
nobody references yet, so no lock is needed), then takes an ``flock`` of
``dir/.name.lock`` only to compare the current link, rename a new link over
it and fsync the directory: the compare-and-set is atomic across threads and
processes, and the lock is held for a few system calls. A lock held by another
process (one paused with SIGSTOP, say) is waited for at most ``lock_timeout_s``
seconds; then the write raises ``StorageUnavailable`` and nothing was written.
A version file whose compare failed is removed; superseded versions are
removed by a background thread.

Every ``OSError`` from the file system (``ENOSPC``, ``EIO``...) is raised as
``StorageUnavailable`` naming the errno, the action and the key, except a
missing file where that means "no such object", and denied access or a
read-only filesystem (``EACCES``, ``EPERM``, ``EROFS``: no retry cures them),
raised as ``StorageRefused``. A write that fails before its rename leaves the
object unchanged and no file behind; one that fails while syncing the
directory after its rename may have landed (``StorageUnavailable``, whatever
the errno).

Needs a POSIX filesystem with ``flock`` and symbolic links: a local disk.
Opening a store on a FUSE mount (Databricks ``/Volumes`` and ``/dbfs``,
s3fs, gcsfuse, blobfuse) or a network filesystem (NFS, SMB, 9p, ...) raises
``UnsafeStore`` naming the cloud URL to use instead; the mount is judged by
its type in the mount table (:mod:`broker.storage.mounts`), not by its path.
The start-up :meth:`FileStore.self_test` also proves that a second lock is
refused while one is held and that a rename replaces its target whole, and
raises ``UnsafeStore`` if not.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from broker.errors import Conflict, InvalidRequest, NotFound, StorageUnavailable, UnsafeStore
from broker.retry import backoff_delays
from broker.storage.base import Data, ObjectStore, Versioned
from broker.storage.fileio import (
    REAPER,
    THREAD_LOCKS,
    disk_error,
    fsync_dir,
    missing_dir_is_empty,
    plain_etag,
    write_file,
)
from broker.storage.mounts import Mount, check_store_dir, parse_mountinfo

_VERSION_MARK = ".v-"

#: Backoff between attempts to take a lock another process holds (seconds).
_LOCK_POLL_FIRST_S = 0.001
_LOCK_POLL_MAX_S = 0.05


class FileStore(ObjectStore):
    """CAS objects and plain objects under one local directory.

    ``fsync`` (default True) makes every write durable before it returns.
    ``lock_timeout_s`` (seconds, default 5.0) bounds the wait for an object's
    lock held by another process or thread; past it the write or delete
    raises ``StorageUnavailable`` having changed nothing.

    Raises ``UnsafeStore`` (creating nothing) if ``root`` resolves onto a FUSE
    or network mount (see :mod:`broker.storage.mounts`); so does any operation
    on a key whose first directory (a queue's) does, being a mount point or a
    symbolic link below the root (checked once per directory, when first used). ``trust_mount``:
    one filesystem type to accept anyway, with a warning at every opening
    (``"fuse.fuse-overlayfs"`` for a rootless container's local disk, say).
    ``mount_table``: the text of a ``/proc/self/mountinfo`` to judge by
    instead of this process's own (for tests).
    """

    etags_differ_on_same_bytes = True
    shared_across_processes = True

    # The system calls the compare-and-set rests on; a test replaces them on a
    # subclass to show that the self-test refuses a store where they fail.
    @staticmethod
    def _flock(fd: int, operation: int) -> None:
        fcntl.flock(fd, operation)

    @staticmethod
    def _replace(src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        fsync: bool = True,
        lock_timeout_s: float = 5.0,
        trust_mount: str | None = None,
        mount_table: str | None = None,
    ) -> None:
        if lock_timeout_s < 0:
            raise ValueError(f"lock_timeout_s must be >= 0 seconds, got {lock_timeout_s}")
        mounts: list[Mount] | None = None if mount_table is None else \
            parse_mountinfo(mount_table)
        check_store_dir(root, mounts=mounts, trust_mount=trust_mount)
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = f"file://{self.root}"
        self._fsync = fsync
        self.lock_timeout_s = lock_timeout_s
        # Each queue's directory (a key's first part) is checked too, once, when first
        # used: a mount point or a symbolic link there would escape the root's check.
        self._mounts, self._trust_mount = mounts, trust_mount
        self._checked_dirs: set[str] = set()
        # Directories this store made or found: a write into one skips the mkdir
        # (a failed mkdir and a stat per write); one removed since is made again.
        self._made_dirs: set[Path] = set()

    # -- paths -----------------------------------------------------------
    def _path(self, key: str) -> Path:
        """The file of ``key`` (one :func:`~broker.storage.base.check_key` passed)."""
        parts = key.split("/")
        if any(p.startswith(".") for p in parts):  # the store's own files are hidden
            raise InvalidRequest(f"object key parts may not start with '.': {key[:60]!r}")
        if len(parts) > 1 and parts[0] not in self._checked_dirs:
            check_store_dir(self.root / parts[0], mounts=self._mounts,
                            trust_mount=self._trust_mount)
            self._checked_dirs.add(parts[0])
        return self.root.joinpath(*parts)

    def _write_new(self, path: Path, data: Data) -> None:
        """Write a file no one refers to yet, making its directory first if need be."""
        directory = path.parent
        if directory not in self._made_dirs:
            directory.mkdir(parents=True, exist_ok=True)
            if len(self._made_dirs) >= 10_000:  # (archive hours of many queues)
                self._made_dirs.clear()
            self._made_dirs.add(directory)
        try:
            write_file(path, data, self._fsync)
        except FileNotFoundError:  # its directory was removed since we made it
            self._made_dirs.discard(directory)
            directory.mkdir(parents=True, exist_ok=True)
            write_file(path, data, self._fsync)

    @staticmethod
    def _version_name(path: Path, etag: str) -> str:
        return f".{path.name}{_VERSION_MARK}{etag}"

    @contextlib.contextmanager
    def _os_errors(self, action: str, key: str) -> Iterator[None]:
        """Raise any ``OSError`` escaping the block as ``StorageUnavailable``, or
        ``StorageRefused`` for denied access or a read-only filesystem."""
        try:
            yield
        except OSError as exc:
            raise disk_error(exc, action, key, self.url) from exc

    def _sync_landed(self, directory: Path, key: str) -> None:
        """Sync ``directory`` after a rename in it landed: a failure is an unknown
        outcome (``StorageUnavailable``), never a refusal, whatever its errno."""
        try:
            fsync_dir(directory)
        except OSError as exc:
            raise disk_error(exc, "writing", key, self.url, may_refuse=False) from exc

    @contextlib.contextmanager
    def _locked(self, path: Path, key: str) -> Iterator[None]:
        """Hold the object's lock, waiting at most ``lock_timeout_s`` seconds.

        Raises ``StorageUnavailable`` if another thread or process keeps it longer.
        """
        deadline = time.monotonic() + self.lock_timeout_s
        lock_path = path.parent / f".{path.name}.lock"
        with THREAD_LOCKS.hold(path, self.lock_timeout_s) as got:
            if not got:
                raise self._lock_timeout(key, "another thread of this process", lock_path)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                # Non-blocking attempts: a blocking flock would wait forever on a
                # holder that is paused (SIGSTOP) or hung on a dead disk.
                delays = backoff_delays(_LOCK_POLL_FIRST_S, _LOCK_POLL_MAX_S)
                while True:
                    try:
                        self._flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise self._lock_timeout(key, "another process", lock_path) from None
                        time.sleep(min(next(delays), left))
                yield
            finally:
                os.close(fd)  # closing the descriptor releases the lock

    def _lock_timeout(self, key: str, holder: str, lock_path: Path) -> StorageUnavailable:
        return StorageUnavailable(
            f"object {key!r} in {self.url}: {holder} holds its lock {lock_path.name} "
            f"for more than {self.lock_timeout_s:g} s (paused or hung?); nothing was written"
        )

    def _current(self, path: Path) -> tuple[str | None, Path | None]:
        """(etag, version file) of the object now, or (None, None) if absent."""
        try:
            target = os.readlink(path)
        except (FileNotFoundError, NotADirectoryError):
            return None, None
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            # A plain file put there by hand (a restored backup, say): give it an
            # etag from its identity; the next write turns it into a link.
            return plain_etag(path.stat()), None
        _, _, etag = target.rpartition(_VERSION_MARK)
        return etag, path.parent / target

    def _exists(self, path: Path) -> bool:
        try:
            os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def _swap(self, path: Path, key: str, data: Data, expect: str | None) -> str:
        """Write a new version of the object at ``path`` if it is still ``expect``.

        ``expect`` None means "only if absent". Returns the new etag; raises
        ``Conflict`` (the version file is then removed) or ``OSError``.
        """
        etag = uuid.uuid4().hex
        version = path.parent / self._version_name(path, etag)
        linked = False
        try:
            self._write_new(version, data)
            with self._locked(path, key):
                if expect is None:
                    old_version = None
                    if self._exists(path):
                        raise Conflict(f"object {key!r} already exists")
                else:
                    current, old_version = self._current(path)
                    if current is None or current != expect:
                        raise Conflict(f"object {key!r} changed since it was read")
                tmp_link = path.parent / f".{path.name}.link-{etag}"
                os.symlink(version.name, tmp_link)
                try:
                    self._replace(tmp_link, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        tmp_link.unlink()
                    raise
                linked = True
            # Outside the lock, so that the lock is held for microseconds and a
            # holder paused (SIGSTOP) inside it is unlikely: the rename is visible
            # already, and a later writer's own directory sync covers it as well.
            if self._fsync:
                self._sync_landed(path.parent, key)
        finally:
            if not linked:
                with contextlib.suppress(OSError):
                    version.unlink()
        if old_version is not None:
            REAPER.add(old_version)
        return etag

    def settle(self) -> None:
        """Wait until superseded version files are deleted."""
        REAPER.wait()

    # -- start-up self-test ------------------------------------------------
    def self_test(self) -> None:
        """The generic conditional-write probes, after proving locks and rename.

        Raises ``UnsafeStore`` if a second ``flock`` of a file is granted while
        the first is held, if ``flock`` fails, or if a rename over an existing
        name (of a file, and of a symbolic link) does not replace it whole and
        remove the source; the probe files (hidden names in the root) are
        removed in any case.
        """
        with self._os_errors("self-testing", "(probe)"):
            self._probe_locks()
            self._probe_rename()
        super().self_test()

    def _unsafe(self, what: str) -> UnsafeStore:
        return UnsafeStore(
            f"file store {self.url} failed its start-up self-test: {what}. The directory is "
            "not on a local disk with working locks and atomic rename; use s3://bucket/prefix, "
            "abfss://container@account.dfs.core.windows.net/prefix or gs://bucket/prefix, "
            "or a local directory instead")

    def _probe_locks(self) -> None:
        lock = self.root / f".osqueue-selftest-{uuid.uuid4().hex}.lock"
        first = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        second = -1
        try:
            second = os.open(lock, os.O_RDWR)
            try:
                self._flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                raise self._unsafe(f"flock failed ({errno.errorcode.get(exc.errno or 0, exc)})") \
                    from None
            try:
                self._flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # refused while held: locks exclude
            else:
                raise self._unsafe("a second flock of a file was granted while the first "
                                   "was held (locks do not exclude)")
        finally:
            os.close(first)
            if second >= 0:
                os.close(second)
            with contextlib.suppress(OSError):
                lock.unlink()

    def _probe_rename(self) -> None:
        base = self.root / f".osqueue-selftest-{uuid.uuid4().hex}"
        names = [base.with_name(base.name + suffix) for suffix in (".a", ".b", ".l", ".m")]
        plain, new, link, new_link = names
        try:
            plain.write_bytes(b"old")
            new.write_bytes(b"new")
            try:
                self._replace(new, plain)
                os.symlink("version-1", link)
                os.symlink("version-2", new_link)
                self._replace(new_link, link)
            except OSError as exc:
                code = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
                raise self._unsafe(f"rename over an existing name failed ({code})") from None
            if plain.read_bytes() != b"new" or os.path.lexists(new):
                raise self._unsafe("a rename over an existing file did not replace it whole")
            if os.readlink(link) != "version-2" or os.path.lexists(new_link):
                raise self._unsafe("a rename over an existing symbolic link did not "
                                   "replace it whole")
        finally:
            for name in names:
                with contextlib.suppress(OSError):
                    name.unlink()

    # -- CAS objects -----------------------------------------------------
    def read(self, key: str) -> Versioned:
        path = self._path(key)
        with self._os_errors("reading", key):
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

    def head(self, key: str) -> str:
        """The etag ``read`` would return, from the link alone (no file is opened)."""
        path = self._path(key)
        with self._os_errors("reading", key):
            etag, _ = self._current(path)
        if etag is None:
            raise NotFound(f"no object {key!r} in {self.url}")
        return etag

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        path = self._path(key)
        with self._os_errors("writing", key):
            return self._swap(path, key, data, etag)

    def create_if_absent(self, key: str, data: Data) -> str:
        path = self._path(key)
        with self._os_errors("writing", key):
            return self._swap(path, key, data, None)

    # -- plain objects ---------------------------------------------------
    def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        with self._os_errors("writing", key):
            tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex}"
            try:
                self._write_new(tmp, data)
                st = tmp.stat()  # a rename keeps inode and times: head() gives this etag
                self._replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise
            if self._fsync:
                self._sync_landed(path.parent, key)
            return plain_etag(st)

    def get(self, key: str) -> bytes:
        return self.read(key).data

    def list(self, prefix: str) -> list[str]:
        base, _, _ = prefix.rpartition("/")
        start = self.root.joinpath(*base.split("/")) if base else self.root
        keys: list[str] = []
        with self._os_errors("listing", prefix):
            for dirpath, dirnames, filenames in os.walk(start, onerror=missing_dir_is_empty):
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
        with self._os_errors("deleting", key):
            if not path.is_symlink():  # a plain object (put): one unlink, no lock file left
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                return
            with self._locked(path, key):
                _, version = self._current(path)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                if version is not None:
                    with contextlib.suppress(FileNotFoundError):
                        version.unlink()
