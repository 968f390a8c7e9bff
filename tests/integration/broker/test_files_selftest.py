"""The file store's start-up self-test refuses a directory whose locks or rename fail.

Each failure is injected by a subclass replacing the one system call it
breaks (``_flock`` or ``_replace``); the directory passes the mount check
(it is on this machine's local disk), so only the self-test can catch it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from broker.errors import UnsafeStore
from broker.storage import FileStore


def _no_lock(fd: int, op: int) -> None:
    """Locks that grant every request (a FUSE mount whose daemon ignores them)."""


def _lock_unsupported(fd: int, op: int) -> None:
    raise OSError(errno.ENOLCK, "No locks available")


def _rename_unsupported(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    raise OSError(errno.EPERM, "Operation not permitted")


def _rename_as_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """A rename that copies and forgets to remove its source (object storage)."""
    if os.path.islink(src):
        os.symlink(os.readlink(src), f"{dst}.copy")
        os.replace(f"{dst}.copy", dst)
    else:
        Path(dst).write_bytes(Path(src).read_bytes())


def _rename_that_does_nothing(src: str | os.PathLike[str],
                              dst: str | os.PathLike[str]) -> None:
    os.unlink(src)


class _NoLocks(FileStore):
    _flock = staticmethod(_no_lock)


class _LocksFail(FileStore):
    _flock = staticmethod(_lock_unsupported)


class _RenameFails(FileStore):
    _replace = staticmethod(_rename_unsupported)


class _RenameCopies(FileStore):
    _replace = staticmethod(_rename_as_copy)


class _RenameLost(FileStore):
    _replace = staticmethod(_rename_that_does_nothing)


def _probe_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".osqueue-selftest"))


def test_a_local_directory_passes_and_keeps_no_probe_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.self_test()
    store.settle()
    assert _probe_files(tmp_path) == []
    assert store.list("") == []


@pytest.mark.parametrize(("cls", "what"), [
    (_NoLocks, "a second flock of a file was granted while the first was held"),
    (_LocksFail, "flock failed (ENOLCK)"),
    (_RenameFails, "rename over an existing name failed (EPERM)"),
    (_RenameCopies, "a rename over an existing file did not replace it whole"),
    (_RenameLost, "a rename over an existing file did not replace it whole"),
])
def test_broken_locks_or_rename_are_refused(tmp_path: Path, cls: type[FileStore],
                                            what: str) -> None:
    store = cls(tmp_path)
    with pytest.raises(UnsafeStore) as err:
        store.self_test()
    msg = err.value.message
    assert f"file store {store.url} failed its start-up self-test: {what}" in msg
    assert "s3://bucket/prefix" in msg and "gs://bucket/prefix" in msg
    assert _probe_files(tmp_path) == []  # cleaned up even when refused
    assert store.list("") == []


def test_the_real_flock_the_store_uses_excludes_a_second_holder(tmp_path: Path) -> None:
    """What ``_probe_locks`` relies on: two opens of one file are two holders."""
    lock = tmp_path / "l"
    a = os.open(lock, os.O_RDWR | os.O_CREAT)
    b = os.open(lock, os.O_RDWR)
    try:
        FileStore._flock(a, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(BlockingIOError):
            FileStore._flock(b, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(a)
        os.close(b)


def test_a_broker_does_not_start_on_a_store_that_fails_the_self_test(tmp_path: Path) -> None:
    from osqueue_spark import start_broker

    with pytest.raises(UnsafeStore, match="failed its start-up self-test"):
        start_broker(_NoLocks(tmp_path))
    assert _probe_files(tmp_path) == []
    assert FileStore(tmp_path).list("") == []  # nothing written
