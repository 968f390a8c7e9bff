"""Injected faults: a paused lock holder, disk errors, S3 refusals and transient errors
(answered by the fault proxy in front of moto's server) and missing credentials."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from broker.errors import Conflict, NotFound, StorageRefused, StorageUnavailable
from broker.storage import FileStore, S3Store, Versioned
from broker.storage import files as files_module
from tests.support.faultproxy import FaultConfig, FaultProxy
from tests.support.motoserver import MotoServer
from tests.support.serving import free_port

KEY = "q/queue.json"

# -- file store: a lock held by another process ---------------------------------

#: Takes the flock of the file named by argv[1], says so on stdout, then stops
#: itself (SIGSTOP) like a paused broker; once continued it holds the lock
#: until its stdin closes.
_HOLD_LOCK = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
sys.stdout.write("locked\\n")
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGSTOP)
sys.stdin.read()
"""


@pytest.fixture()
def lock_holder(tmp_path: Path) -> Iterator[Callable[[Path], subprocess.Popen[str]]]:
    """Start processes that hold a lock file while stopped; kill them afterwards."""
    procs: list[subprocess.Popen[str]] = []

    def start(lock_file: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD_LOCK, str(lock_file)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline() == "locked\n"  # waits until the child holds it
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait(timeout=30)


def _files_under(root: Path) -> list[str]:
    return sorted(
        str(Path(dirpath, name).relative_to(root))
        for dirpath, _, names in os.walk(root) for name in names
    )


def test_lock_held_by_a_paused_process_is_waited_on_for_a_bounded_time(
    tmp_path: Path, lock_holder: Callable[[Path], subprocess.Popen[str]]
) -> None:
    store = FileStore(tmp_path, lock_timeout_s=0.5)
    etag = store.create_if_absent(KEY, b"one")
    store.create_if_absent("other/queue.json", b"x")
    store.settle()
    files_before = _files_under(tmp_path)
    proc = lock_holder(tmp_path / "q" / ".queue.json.lock")

    started = time.monotonic()
    with pytest.raises(StorageUnavailable, match="another process holds its lock") as info:
        store.write_if_match(KEY, b"two", etag)
    waited = time.monotonic() - started
    assert 0.5 <= waited < 3.0
    assert repr(KEY) in str(info.value) and "nothing was written" in str(info.value)
    with pytest.raises(StorageUnavailable, match="another process holds its lock"):
        store.delete(KEY)
    assert store.read(KEY) == Versioned(b"one", etag)
    assert _files_under(tmp_path) == files_before  # the unused version file is gone
    # Other objects have their own locks.
    store.write_if_match("other/queue.json", b"y", store.head("other/queue.json"))

    proc.send_signal(signal.SIGCONT)
    assert proc.stdin is not None
    proc.stdin.close()  # the child exits, and with it its lock
    assert proc.wait(timeout=30) == 0
    store.write_if_match(KEY, b"two", etag)
    assert store.read(KEY).data == b"two"


def test_lock_held_by_another_thread_is_waited_on_for_a_bounded_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path, lock_timeout_s=0.3)
    etag = store.create_if_absent(KEY, b"one")
    inside, release = threading.Event(), threading.Event()
    real_symlink = os.symlink

    def stuck_symlink(src: str, dst: Any) -> None:
        if threading.current_thread().name == "stuck-writer":
            inside.set()
            release.wait(30)
        real_symlink(src, dst)

    monkeypatch.setattr(os, "symlink", stuck_symlink)
    results: list[object] = []

    def stuck_writer() -> None:
        results.append(store.write_if_match(KEY, b"stuck", etag))

    thread = threading.Thread(target=stuck_writer, name="stuck-writer")
    thread.start()
    try:
        assert inside.wait(30)
        with pytest.raises(StorageUnavailable, match="another thread of this process"):
            store.write_if_match(KEY, b"other", etag)
    finally:
        release.set()
        thread.join(30)
    assert store.read(KEY).data == b"stuck" and len(results) == 1


def test_version_file_is_written_and_synced_before_the_lock_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    etag = store.create_if_absent(KEY, b"one")
    events: list[str] = []
    listed: list[list[str]] = []
    real_flock, real_writev, real_fsync = fcntl.flock, os.writev, os.fsync

    def flock(fd: int, op: int) -> None:
        if op & fcntl.LOCK_EX:
            events.append("lock")
            listed.append(store.list("q/"))  # the new version file exists by now
        real_flock(fd, op)

    def writev(fd: int, buffers: Any) -> int:
        events.append("write")
        return real_writev(fd, buffers)

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(files_module.fcntl, "flock", flock)
    monkeypatch.setattr(files_module.os, "writev", writev)
    monkeypatch.setattr(files_module.os, "fsync", fsync)
    new = store.write_if_match(KEY, b"two", etag)
    # Inside the lock only the directory is synced; the data was synced before.
    assert events == ["write", "fsync", "lock", "fsync"]
    assert listed == [[KEY]]
    assert store.read(KEY) == Versioned(b"two", new)


def test_lost_compare_removes_the_version_file_written_before_the_lock(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    first = store.create_if_absent(KEY, b"one")
    store.write_if_match(KEY, b"two", first)
    store.settle()
    files_before = _files_under(tmp_path)
    with pytest.raises(Conflict):
        store.write_if_match(KEY, b"three", first)
    with pytest.raises(Conflict):
        store.create_if_absent(KEY, b"four")
    assert _files_under(tmp_path) == files_before


# -- file store: OS errors ----------------------------------------------------------


def _raising(err: int) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OSError(err, os.strerror(err))

    return fail


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize("fault", ["writev", "fsync"])
def test_failed_writes_raise_storage_unavailable_and_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int, fault: str
) -> None:
    store = FileStore(tmp_path)
    etag = store.create_if_absent(KEY, b"one")
    store.put("q/archive/old.jsonl", b"old")
    store.settle()
    files_before = _files_under(tmp_path)
    name = errno.errorcode[err]

    monkeypatch.setattr(files_module.os, fault, _raising(err))
    writes: list[tuple[str, Callable[[], object]]] = [
        (KEY, lambda: store.write_if_match(KEY, b"two", etag)),
        ("q/new.json", lambda: store.create_if_absent("q/new.json", b"new")),
        ("q/archive/new.jsonl", lambda: store.put("q/archive/new.jsonl", b"new")),
        ("q/archive/old.jsonl", lambda: store.put("q/archive/old.jsonl", b"newer")),
    ]
    for key, write in writes:
        with pytest.raises(StorageUnavailable) as info:
            write()
        assert f"local disk error {name} writing {key!r}" in str(info.value)
    monkeypatch.undo()

    assert store.read(KEY) == Versioned(b"one", etag)
    assert store.get("q/archive/old.jsonl") == b"old"
    assert store.list("") == ["q/archive/old.jsonl", KEY]
    assert _files_under(tmp_path) == files_before


def test_directory_sync_failure_after_the_rename_is_an_unknown_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    monkeypatch.setattr(files_module.os, "open", tracking_open)
    monkeypatch.setattr(files_module.os, "fsync", fsync)
    with pytest.raises(StorageUnavailable, match="EIO writing"):
        store.write_if_match(KEY, b"two", etag)
    monkeypatch.undo()
    # The write landed: StorageUnavailable means "re-read to find out".
    assert store.read(KEY).data == b"two"


@pytest.mark.parametrize("err", [errno.EIO, errno.ENFILE])  # (EACCES: test_storage_files_denied)
def test_failed_reads_raise_storage_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int
) -> None:
    store = FileStore(tmp_path)
    store.create_if_absent(KEY, b"one")
    store.put("q/archive/a.jsonl", b"a")
    name = errno.errorcode[err]
    calls: list[tuple[str, str, str, Callable[[], object]]] = [
        ("readlink", "reading", KEY, lambda: store.read(KEY)),
        ("readlink", "reading", KEY, lambda: store.head(KEY)),
        ("readlink", "deleting", KEY, lambda: store.delete(KEY)),
        ("unlink", "deleting", "q/archive/a.jsonl", lambda: store.delete("q/archive/a.jsonl")),
        ("scandir", "listing", "q/", lambda: store.list("q/")),
    ]
    for fault, action, key, call in calls:
        with monkeypatch.context() as patch:
            patch.setattr(files_module.os, fault, _raising(err))
            with pytest.raises(StorageUnavailable) as info:
                call()
        assert f"local disk error {name} {action} {key!r}" in str(info.value)
    with monkeypatch.context() as patch:
        patch.setattr(Path, "read_bytes", _raising(err))
        with pytest.raises(StorageUnavailable, match=f"{name} reading 'q/archive/a.jsonl'"):
            store.get("q/archive/a.jsonl")
    assert store.list("q/") == ["q/archive/a.jsonl", KEY]


def test_missing_directories_are_still_just_absent(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put("plain", b"x")
    assert store.list("nowhere/") == []
    assert store.list("plain/under/") == []  # "plain" is a file, not a directory
    with pytest.raises(NotFound):
        store.read("plain/under")
    with pytest.raises(NotFound):
        store.head("nowhere/queue.json")


# -- S3: permanent refusals -------------------------------------------------------


def _count_calls(store: S3Store) -> list[str]:
    """Record the operation name of every API call the store's client makes."""
    calls: list[str] = []

    def seen(model: Any, **_: Any) -> None:
        calls.append(model.name)

    store._client.meta.events.register("before-parameter-build.s3", seen)
    return calls


_S3_CALLS: dict[str, tuple[str, Callable[[S3Store], object]]] = {
    "read": ("get_object", lambda s: s.read(KEY)),
    "head": ("head_object", lambda s: s.head(KEY)),
    "write_if_match": ("put_object", lambda s: s.write_if_match(KEY, b"x", '"e"')),
    "create_if_absent": ("put_object", lambda s: s.create_if_absent(KEY, b"x")),
    "put": ("put_object", lambda s: s.put(KEY, b"x")),
    "delete": ("delete_object", lambda s: s.delete(KEY)),
}


#: every storage request through the proxy answered with its configured S3 error
ONLY_ERROR = {"error500": 0.0, "error503": 0.0, "drop": 0.0, "delay": 0.0, "error": 1.0}


@pytest.fixture()
def s3_errors(moto_server: MotoServer) -> Iterator[FaultProxy]:
    """The fault proxy in front of the session's moto server, answering every storage
    request with the error set by ``configure(error_status=, error_code=)``."""
    with FaultProxy(moto_server.endpoint, config=FaultConfig(rate=1.0, weights=ONLY_ERROR)) \
            as proxy:
        yield proxy


def _keys(moto_server: MotoServer, bucket: str) -> list[str]:
    client = boto3.client("s3", endpoint_url=moto_server.endpoint, region_name="us-east-1")
    try:
        return [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    finally:
        client.close()


@pytest.mark.parametrize(
    ("status", "code", "said"),
    [
        (403, "AccessDenied", "denied access"),
        (400, "InvalidRequest", "refused"),
        (400, "InvalidArgument", "refused"),
        (301, "PermanentRedirect", "region eu-west-1"),
        (307, "TemporaryRedirect", "region eu-west-1"),
        (405, "MethodNotAllowed", "refused"),
    ],
)
@pytest.mark.parametrize("method", sorted(_S3_CALLS))
def test_s3_permanent_errors_are_refused_without_retrying(
    s3_errors: FaultProxy, moto_server: MotoServer, s3_bucket: str, status: int, code: str,
    said: str, method: str
) -> None:
    # a redirect names the bucket's region, as S3's do (botocore follows it once, to
    # the same endpoint here, and gets the redirect again)
    s3_errors.configure(error_status=status, error_code=code,
                        error_region="eu-west-1" if status in (301, 307) else None)
    store = S3Store(s3_bucket, "p", endpoint_url=s3_errors.url, retries=5)
    calls = _count_calls(store)
    operation, call = _S3_CALLS[method]
    with pytest.raises(StorageRefused, match=said) as info:
        call(store)
    store.close()
    assert not isinstance(info.value, StorageUnavailable)
    name = operation.replace("_", " ").title().replace(" ", "")
    # one attempt; a HEAD's 400 has no body, and botocore then asks for the bucket's
    # region itself (its own HeadBucket)
    assert calls == [name] + (["HeadBucket"] if (method, status) == ("head", 400) else [])
    assert _keys(moto_server, s3_bucket) == []  # nothing was written


@pytest.mark.parametrize("method", sorted(_S3_CALLS))
def test_s3_redirect_naming_no_region_is_refused_after_one_bucket_lookup(
    s3_errors: FaultProxy, moto_server: MotoServer, s3_bucket: str, method: str
) -> None:
    # an endpoint that redirects everything and names no region (a proxy sending
    # http to https, say): botocore asks the bucket for its region, is redirected
    # again, and without the store's guard asks again inside that lookup until a
    # RecursionError, about a thousand requests later
    s3_errors.configure(error_status=301, error_code="PermanentRedirect", error_region=None)
    store = S3Store(s3_bucket, "p", endpoint_url=s3_errors.url, retries=5)
    sent: list[str] = []
    store._client.meta.events.register(
        "before-send.s3", lambda request, **_: sent.append(request.method))
    _, call = _S3_CALLS[method]
    with pytest.raises(StorageRefused, match="redirected the request") as info:
        call(store)
    store.close()
    assert not isinstance(info.value, StorageUnavailable)
    # the call itself and one HEAD of the bucket, never retried
    assert len(sent) == 2 and sent[1] == "HEAD", sent
    assert _keys(moto_server, s3_bucket) == []  # nothing was written


@pytest.mark.parametrize(
    ("status", "code"),
    [(503, "SlowDown"), (500, "InternalError"), (429, "TooManyRequests"),
     (400, "RequestTimeout"),
     # a proxy's bare 408 (botocore names the code after the status)
     (408, "408")],
)
def test_s3_transient_errors_are_still_retried(
    s3_errors: FaultProxy, moto_server: MotoServer, s3_bucket: str, status: int, code: str
) -> None:
    s3_errors.configure(error_status=status, error_code=code)
    store = S3Store(s3_bucket, "p", endpoint_url=s3_errors.url, retries=3)
    calls = _count_calls(store)
    with pytest.raises(StorageUnavailable):
        store.read(KEY)
    assert calls == ["GetObject"] * 3
    # the same error twice, then the object: the third attempt reads it
    direct = S3Store(s3_bucket, "p", endpoint_url=moto_server.endpoint)
    direct.put(KEY, b"state")
    direct.close()
    s3_errors.configure(limit=2)
    calls.clear()
    assert store.read(KEY).data == b"state"
    assert calls == ["GetObject"] * 3
    store.close()


def test_s3_connection_errors_are_still_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    port = free_port()  # nothing listens there
    store = S3Store("bkt", "p", endpoint_url=f"http://127.0.0.1:{port}", retries=2,
                    timeout_s=2)
    calls = _count_calls(store)
    with pytest.raises(StorageUnavailable, match="EndpointConnectionError"):
        store.read(KEY)
    assert calls == ["GetObject", "GetObject"]
    store.close()


@pytest.fixture()
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Hide every credential source boto3 would look at."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.parametrize("partial", [False, True])
def test_s3_missing_credentials_are_refused(
    moto_server: MotoServer, s3_bucket: str, no_aws_credentials: None,
    monkeypatch: pytest.MonkeyPatch, partial: bool,
) -> None:
    secret_id = "AKIADONOTPRINTTHIS01"
    if partial:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", secret_id)
    calls: list[str] = []

    def use_the_store() -> None:
        store = S3Store(s3_bucket, "p", endpoint_url=moto_server.endpoint, retries=5)
        calls.extend(["made"])
        store._client.meta.events.register(
            "before-parameter-build.s3", lambda model, **_: calls.append(model.name))
        store.create_if_absent(KEY, b"x")

    with pytest.raises(StorageRefused, match="credentials are missing") as info:
        use_the_store()
    # Partial credentials are found when the client is made, missing ones on the first call.
    assert calls == ([] if partial else ["made", "PutObject"])
    expected = "PartialCredentialsError" if partial else "NoCredentialsError"
    assert expected in str(info.value)
    assert secret_id not in str(info.value) and secret_id not in repr(info.value)


def test_s3_missing_bucket_is_refused_but_a_missing_key_is_not_found(
    moto_server: MotoServer, s3_bucket: str
) -> None:
    missing = f"osq-missing-{uuid.uuid4().hex[:8]}"
    store = S3Store(missing, "p", endpoint_url=moto_server.endpoint, retries=5)
    calls = _count_calls(store)
    for method, (operation, call) in _S3_CALLS.items():
        calls.clear()
        with pytest.raises(StorageRefused, match="does not exist") as info:
            call(store)
        assert missing in str(info.value), method
        # one call each (head adds one HEAD of the bucket to tell the two 404s apart)
        expected = [operation.replace("_", " ").title().replace(" ", "")]
        assert calls == expected + (["HeadBucket"] if method == "head" else []), method
    store.close()

    present = S3Store(s3_bucket, "p", endpoint_url=moto_server.endpoint)
    calls = _count_calls(present)
    with pytest.raises(NotFound):
        present.read(KEY)
    with pytest.raises(NotFound):
        present.head(KEY)
    with pytest.raises(Conflict):
        present.write_if_match(KEY, b"x", '"nope"')
    assert calls == ["GetObject", "HeadObject", "HeadBucket", "PutObject"]
    present.close()
