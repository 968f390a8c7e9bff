"""GCS-only tests: our JSON-API test server's preconditions, the GCS store's refusals,
errors, credentials and URL options. The shared contract is ``TestGCSStore`` in
test_storage.py."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.oauth2.credentials import Credentials

from broker.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    StorageRefused,
    StorageUnavailable,
    UnsafeStore,
)
from broker.storage import store_from_url
from broker.storage.gcs import GCSStore
from tests.support.gcsserver import GCSServer

SECRET = "ya29.SECRET-TOKEN-never-shown"


@pytest.fixture()
def bucket(gcs_server: GCSServer) -> str:
    name = f"b-{time.monotonic_ns()}"
    gcs_server.create_bucket(name)
    return name


@pytest.fixture()
def store(gcs_server: GCSServer, bucket: str) -> Iterator[GCSStore]:
    store = GCSStore(bucket, "p", endpoint_url=gcs_server.endpoint, retries=3)
    yield store
    store.close()


# -- the test server itself (raw HTTP, no client library) ----------------------

def _upload(endpoint: str, bucket: str, name: str, data: bytes, **pre: int) -> tuple[int, Any]:
    query = "&".join([f"uploadType=media&name={name}"] + [f"{k}={v}" for k, v in pre.items()])
    req = urllib.request.Request(f"{endpoint}/upload/storage/v1/b/{bucket}/o?{query}",
                                 data=data, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _download(endpoint: str, bucket: str, name: str) -> tuple[bytes, str]:
    url = f"{endpoint}/download/storage/v1/b/{bucket}/o/{name}?alt=media"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read(), resp.headers["X-Goog-Generation"]


def test_server_enforces_generation_preconditions(gcs_server: GCSServer, bucket: str) -> None:
    ep = gcs_server.endpoint
    status, first = _upload(ep, bucket, "k", b"one", ifGenerationMatch=0)
    assert status == 200
    gen1 = int(first["generation"])
    assert _upload(ep, bucket, "k", b"two", ifGenerationMatch=0)[0] == 412  # exists
    assert _upload(ep, bucket, "k", b"two", ifGenerationMatch=gen1 + 1)[0] == 412  # stale
    assert _upload(ep, bucket, "k", b"two", ifGenerationNotMatch=gen1)[0] == 412
    assert _download(ep, bucket, "k") == (b"one", str(gen1))  # nothing changed
    status, second = _upload(ep, bucket, "k", b"two", ifGenerationMatch=gen1)
    assert status == 200 and int(second["generation"]) > gen1
    assert _upload(ep, bucket, "k", b"three", ifGenerationMatch=gen1)[0] == 412
    assert _upload(ep, bucket, "missing", b"x", ifGenerationMatch=gen1)[0] == 412
    assert _download(ep, bucket, "k") == (b"two", second["generation"])


def test_server_generations_never_repeat_even_after_a_delete(gcs_server: GCSServer,
                                                             bucket: str) -> None:
    seen = []
    for _ in range(3):
        status, obj = _upload(gcs_server.endpoint, bucket, "k", b"same", ifGenerationMatch=0)
        assert status == 200
        seen.append(int(obj["generation"]))
        req = urllib.request.Request(f"{gcs_server.endpoint}/storage/v1/b/{bucket}/o/k",
                                     method="DELETE")
        urllib.request.urlopen(req, timeout=10).close()
    assert seen == sorted(set(seen))


def test_server_in_ignore_mode_accepts_what_it_must_refuse() -> None:
    with GCSServer(ignore_preconditions=True) as unsafe:
        unsafe.create_bucket("b")
        assert _upload(unsafe.endpoint, "b", "k", b"one", ifGenerationMatch=0)[0] == 200
        assert _upload(unsafe.endpoint, "b", "k", b"two", ifGenerationMatch=0)[0] == 200
        assert _upload(unsafe.endpoint, "b", "k", b"three", ifGenerationMatch=1)[0] == 200
        assert _download(unsafe.endpoint, "b", "k")[0] == b"three"


# -- the store's refusals ------------------------------------------------------

def test_stale_generation_is_refused_and_changes_nothing(store: GCSStore) -> None:
    first = store.create_if_absent("q/queue.json", b"one")
    second = store.write_if_match("q/queue.json", b"two", first)
    assert int(second) > int(first)
    with pytest.raises(Conflict):
        store.write_if_match("q/queue.json", b"three", first)
    with pytest.raises(Conflict):
        store.create_if_absent("q/queue.json", b"four")
    assert store.read("q/queue.json").data == b"two"
    assert store.head("q/queue.json") == second
    with pytest.raises(Conflict):  # a real generation, of an object that is gone
        store.write_if_match("q/missing.json", b"x", second)
    with pytest.raises(NotFound):
        store.read("q/missing.json")


@pytest.mark.parametrize("etag", ["0", "-1", "abc", "007", ""])
def test_an_etag_that_is_no_generation_never_creates(store: GCSStore, etag: str) -> None:
    # ifGenerationMatch=0 would mean "create": an etag of "0" must not turn into one.
    with pytest.raises(Conflict):
        store.write_if_match("q/queue.json", b"x", etag)
    with pytest.raises(NotFound):
        store.read("q/queue.json")


def test_large_objects_keep_compare_and_set(store: GCSStore) -> None:
    # Over 8 MiB the client switches to a resumable upload (two requests).
    big = b"x" * (9 * 1024 * 1024)
    first = store.create_if_absent("q/queue.json", big)
    with pytest.raises(Conflict):
        store.create_if_absent("q/queue.json", big)
    second = store.write_if_match("q/queue.json", big + b"y", first)
    with pytest.raises(Conflict):
        store.write_if_match("q/queue.json", b"stale", first)
    got = store.read("q/queue.json")
    assert (len(got.data), got.etag) == (len(big) + 1, second)


def test_self_test_refuses_a_server_that_ignores_preconditions() -> None:
    with GCSServer(ignore_preconditions=True) as unsafe:
        unsafe.create_bucket("b")
        store = GCSStore("b", "p", endpoint_url=unsafe.endpoint)
        with pytest.raises(UnsafeStore, match="ifGenerationMatch") as info:
            store.self_test()
        assert "must be refused" in info.value.message
        assert store.list("") == []  # the probe was removed


def test_self_test_refuses_the_pypi_gcp_storage_emulator() -> None:
    """The real ``gcp-storage-emulator`` from PyPI ignores generation preconditions."""
    server_mod = pytest.importorskip("gcp_storage_emulator.server")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    emulator = server_mod.create_server("127.0.0.1", port, in_memory=True,
                                        default_bucket="emu")
    emulator.start()
    try:
        store = GCSStore("emu", "p", endpoint_url=f"http://127.0.0.1:{port}")
        with pytest.raises(UnsafeStore, match="gcp-storage-emulator"):
            store.self_test()
        store.close()
    finally:
        emulator.stop()


def test_list_follows_pages() -> None:
    with GCSServer(max_page=2) as small:
        small.create_bucket("b")
        store = GCSStore("b", "p", endpoint_url=small.endpoint)
        names = [f"q/archive/{n:02d}.jsonl" for n in range(7)]
        for name in reversed(names):
            store.put(name, b"x")
        store.put("other", b"x")
        assert store.list("q/") == names
        assert store.list("") == ["other", *names]


def test_missing_bucket_is_refused_not_missing_objects(gcs_server: GCSServer) -> None:
    store = GCSStore("no-such-bucket", "p", endpoint_url=gcs_server.endpoint, retries=1)
    for call in (lambda: store.read("k"), lambda: store.head("k"), lambda: store.get("k"),
                 lambda: store.create_if_absent("k", b"x"), lambda: store.put("k", b"x"),
                 lambda: store.list("")):
        with pytest.raises(StorageRefused, match="gs://no-such-bucket does not exist"):
            call()


def test_a_call_sends_only_its_own_requests(gcs_server: GCSServer, bucket: str) -> None:
    # No background requests of the SDK's own (it fetches bucket metadata on a thread
    # for tracing): they would escape the store's timeouts and retries.
    store = GCSStore(bucket, "p", endpoint_url=gcs_server.endpoint)
    gcs_server.state.seen.clear()
    etag = store.create_if_absent("k", b"v")
    assert store.read("k").etag == store.head("k") == etag
    store.close()
    # an absence has no event to wait on: give a background request, were one
    # started, time to arrive
    time.sleep(0.2)
    assert list(gcs_server.state.seen) == [
        f"POST /upload/storage/v1/b/{bucket}/o",
        f"GET /download/storage/v1/b/{bucket}/o/p%2Fk",
        f"GET /storage/v1/b/{bucket}/o/p%2Fk"]


# -- transient and permanent failures (injected by the test server) ------------

def test_transient_answers_are_retried_then_given_up(gcs_server: GCSServer,
                                                     store: GCSStore) -> None:
    etag = store.create_if_absent("k", b"one")
    gcs_server.inject(503, 429)
    assert store.read("k").etag == etag  # the third attempt
    gcs_server.inject(500, 503, 500)
    with pytest.raises(StorageUnavailable, match="HTTP 500"):
        store.write_if_match("k", b"two", etag)  # retries=3
    assert store.read("k").data == b"one"  # the injected answers changed nothing


@pytest.mark.parametrize("status", [400, 401, 403])
def test_refusals_are_not_retried(gcs_server: GCSServer, store: GCSStore, status: int) -> None:
    store.put("k", b"x")
    gcs_server.inject(status, 503)
    with pytest.raises(StorageRefused, match=f"HTTP {status}"):
        store.get("k")
    gcs_server.state.faults.clear()  # the 503 must not have been consumed
    assert store.get("k") == b"x"


def test_timeout_and_retries_from_the_url(unanswering_port: int) -> None:
    store = store_from_url(
        f"gs://b/p?endpoint=http://127.0.0.1:{unanswering_port}&timeout_s=0.3&retries=2")
    assert isinstance(store, GCSStore)
    assert (store.timeout_s, store.retries) == (0.3, 2)
    started = time.monotonic()
    with pytest.raises(StorageUnavailable):
        store.read("q/queue.json")
    assert time.monotonic() - started < 5  # the default 10 s timeout would take 20 s


@pytest.fixture()
def unanswering_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield int(server.getsockname()[1])


# -- URLs and credentials ------------------------------------------------------

def test_gs_urls(gcs_server: GCSServer) -> None:
    store = store_from_url(f"gs://bkt/some/prefix/?endpoint={gcs_server.endpoint}")
    assert isinstance(store, GCSStore)
    assert (store.bucket, store.prefix, store.endpoint) == ("bkt", "some/prefix",
                                                            gcs_server.endpoint)
    assert (store.timeout_s, store.retries) == (10.0, 5)
    assert store.url == f"gs://bkt/some/prefix at 127.0.0.1:{gcs_server.port}"
    assert type(store).etags_differ_on_same_bytes and type(store).shared_across_processes


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("gs:///prefix", "gs://bucket/prefix"),
        ("gs://b/p?region=us&colour=red", "unknown GCS store URL option(s) colour, region"),
        ("gs://b/p?retries=0", "retries='0'"),
        ("gs://b/p?timeout_s=nan", "timeout_s='nan'"),
        ("gs://b/p?retries=1&retries=2", "more than once: retries"),
    ],
)
def test_bad_gs_urls_are_refused(url: str, named: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        store_from_url(url)
    assert named in str(info.value)


def test_the_core_does_not_import_the_gcs_client() -> None:
    code = ("import sys, broker.storage, broker.service.broker; "
            "print(sorted(m for m in sys.modules if m.startswith('google.cloud')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "[]"


def test_gs_urls_without_the_gcp_extra_name_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "broker.storage.gcs", None)  # as if not installed
    with pytest.raises(StorageRefused, match=r"pip install 'osqueue-spark\[gcp\]'"):
        store_from_url("gs://b/p")


def test_storage_emulator_host_works_as_for_the_sdk(
        gcs_server: GCSServer, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json")
    store = store_from_url(f"gs://{bucket}/p")  # no endpoint: the variable's, anonymously
    assert isinstance(store, GCSStore) and store.endpoint == gcs_server.endpoint
    etag = store.create_if_absent("k", b"v")
    assert store.read("k").etag == etag
    # host:port without a scheme, as some tools set it
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"127.0.0.1:{gcs_server.port}")
    assert store_from_url(f"gs://{bucket}/p").read("k").data == b"v"


def test_missing_credentials_are_refused_naming_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    key = tmp_path / "key.json"  # a broken service account key holding a secret
    key.write_text(json.dumps({"type": "service_account", "private_key": SECRET}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    with pytest.raises(StorageRefused, match="GOOGLE_APPLICATION_CREDENTIALS") as info:
        store_from_url("gs://b/p")
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)


def test_credentials_never_show_in_reprs_errors_or_logs(
        gcs_server: GCSServer, bucket: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    endpoint = gcs_server.endpoint.replace("http://", f"http://user:{SECRET}@")
    store = GCSStore(bucket, "p", endpoint_url=endpoint, retries=2,
                     credentials=Credentials(token=SECRET))
    shown = [repr(store), store.url]
    store.put("k", b"x")
    for statuses in ((401,), (403,), (503, 503)):  # refusals are not retried
        gcs_server.inject(*statuses)
        with pytest.raises((StorageRefused, StorageUnavailable)) as info:
            store.get("k")
        shown += [str(info.value), repr(info.value), info.value.message]
        assert gcs_server.state.faults == []
    assert not [text for text in shown if SECRET in text]
    assert SECRET not in caplog.text
    assert store.get("k") == b"x"  # the token was sent and accepted
