"""The file store's "access denied": ``EACCES``, ``EPERM`` and ``EROFS`` (a directory
it may not read or write, a read-only filesystem) are ``StorageRefused``, as S3's
403 and a missing bucket are: no retry cures them, so a broker's start-up fails
at once instead of retrying for its whole start-up time. A failure after a write
landed (syncing the directory after the rename) stays an unknown outcome,
whatever its errno. Injected by replacing one system call (the tests run as
root, for whom permissions deny nothing)."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.errors import StorageRefused, StorageUnavailable
from broker.service.broker import Broker
from broker.service.config import BrokerConfig
from broker.storage import FileStore
from broker.storage import files as files_module
from tests.support.inprocess import run

KEY = "q/queue.json"
DENIED = [errno.EACCES, errno.EPERM, errno.EROFS]


def _raising(err: int) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OSError(err, os.strerror(err))

    return fail


@pytest.mark.parametrize("err", DENIED)
def test_denied_calls_are_refused_and_change_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    store = FileStore(tmp_path)
    etag = store.create_if_absent(KEY, b"one")
    store.put("q/archive/a.jsonl", b"a")
    name = errno.errorcode[err]
    calls: list[tuple[str, str, str, Callable[[], object]]] = [
        ("readlink", "reading", KEY, lambda: store.read(KEY)),
        ("readlink", "reading", KEY, lambda: store.head(KEY)),
        ("scandir", "listing", "q/", lambda: store.list("q/")),
        ("symlink", "writing", KEY, lambda: store.write_if_match(KEY, b"two", etag)),
        ("open", "writing", "q/other.json", lambda: store.create_if_absent("q/other.json", b"x")),
        ("replace", "writing", "q/archive/b.jsonl", lambda: store.put("q/archive/b.jsonl", b"b")),
        ("unlink", "deleting", "q/archive/a.jsonl", lambda: store.delete("q/archive/a.jsonl")),
    ]
    for fault, action, key, call in calls:
        with monkeypatch.context() as patch:
            patch.setattr(files_module.os, fault, _raising(err))
            with pytest.raises(StorageRefused) as info:
                call()
        assert f"local disk refused {action} {key!r} in {store.url}: {name}" in str(info.value)
    assert store.read(KEY).data == b"one"
    assert store.list("q/") == ["q/archive/a.jsonl", KEY]


@pytest.mark.parametrize("err", DENIED)
def test_a_denied_directory_sync_after_the_rename_is_an_unknown_outcome(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    store = FileStore(tmp_path)
    etag = store.create_if_absent(KEY, b"one")
    real_open, real_fsync = os.open, os.fsync
    dir_fds: set[int] = set()

    def tracking_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if flags & os.O_DIRECTORY:
            dir_fds.add(fd)
        return fd

    def fsync(fd: int) -> None:
        if fd in dir_fds:
            raise OSError(err, os.strerror(err))
        real_fsync(fd)

    monkeypatch.setattr(files_module.os, "open", tracking_open)
    monkeypatch.setattr(files_module.os, "fsync", fsync)
    said = f"local disk error {errno.errorcode[err]} writing"
    with pytest.raises(StorageUnavailable, match=said):
        store.write_if_match(KEY, b"two", etag)
    monkeypatch.undo()
    assert store.read(KEY).data == b"two"  # it landed: "re-read to find out"


@pytest.mark.parametrize(("fault", "self_test"), [("open", True), ("scandir", False)])
def test_a_denied_directory_fails_start_up_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        fault: str, self_test: bool) -> None:
    """The self-test's first file, or the listing of the store, is denied: the
    broker raises at once, though its start-up time is long."""
    caplog.set_level(logging.WARNING, "osqueue")
    store = FileStore(tmp_path)
    broker = Broker(store, BrokerConfig(url="http://b", self_test=self_test,
                                        startup_timeout_s=600))

    async def go() -> StorageRefused:
        with monkeypatch.context() as patch:
            patch.setattr(files_module.os, fault, _raising(errno.EACCES))
            try:
                await broker.start()
            except StorageRefused as exc:
                return exc
            finally:
                patch.undo()
                await broker.stop(1)
        raise AssertionError("start-up did not fail")

    error = run(go(), timeout_s=30)
    assert "local disk refused" in error.message and "EACCES" in error.message
    assert not [r for r in caplog.records if r.getMessage().startswith("start-up:")]
    assert not os.listdir(tmp_path)  # nothing written
