"""Edges of the Azure and GCS stores found in review: a prefix that leaves its container,
etags that name no single version, 409s that no retry cures, and SDK errors (with request
URLs that carry a SAS or a resumable-upload capability) kept alive on an error's chain.
Each against a real server on 127.0.0.1 (Azurite, our GCS test server, or a socket that
answers one injected error), and each checks the store afterwards."""

from __future__ import annotations

import datetime
import pickle
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.storage.blob import (
    AccountSasPermissions,
    ContainerClient,
    ResourceTypes,
    generate_account_sas,
)

from broker.errors import Conflict, InvalidRequest, StorageRefused, StorageUnavailable
from broker.storage import Versioned, store_from_url
from broker.storage.azure import AzureStore
from broker.storage.gcs import GCSStore
from tests.support.azuriteserver import AzuriteServer
from tests.support.gcsserver import GCSServer


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception reachable through ``__cause__`` / ``__context__``."""
    out: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or any(item is seen for seen in out):
            continue
        out.append(item)
        todo += [item.__cause__, item.__context__]
    return out


@pytest.fixture()
def account_sas(azurite_server: AzuriteServer) -> str:
    """A real account SAS for the session's Azurite (read, write, list, delete)."""
    return generate_account_sas(
        azurite_server.account, azurite_server.key,
        ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, create=True,
                              add=True),
        expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1))


@pytest.fixture()
def other_container(azurite_server: AzuriteServer) -> str:
    name = f"osq-other-{datetime.datetime.now().strftime('%H%M%S%f')}"
    azurite_server.create_container(name)
    return name


def _blob_names(azurite_server: AzuriteServer, container: str) -> list[str]:
    client = ContainerClient.from_connection_string(azurite_server.connection_string, container)
    with client:
        return sorted(client.list_blob_names())


# -- a prefix or key with dot segments ------------------------------------------

def test_azure_dot_segments_never_reach_another_container(
        azurite_server: AzuriteServer, azure_container: str, other_container: str,
        account_sas: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The HTTP stack drops dot segments from the blob URL: az://c/.. with a SAS (or a
    token) wrote into *another* container, where c's own listing never found it."""
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", account_sas)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", azurite_server.account)
    endpoint = azurite_server.endpoint
    for url in (f"az://{azure_container}/..?endpoint={endpoint}",
                f"az://{azure_container}/p/../../x?endpoint={endpoint}",
                f"az://{azure_container}/./p?endpoint={endpoint}"):
        with pytest.raises(InvalidRequest, match=r"'\.' or '\.\.' segment"):
            store_from_url(url)
    store = AzureStore(azure_container, "", account_url=endpoint,
                       credential=AzureSasCredential(account_sas))
    with pytest.raises(InvalidRequest):
        store.put(f"../{other_container}/archive/x.jsonl", b"jobs")
    with pytest.raises(InvalidRequest):
        store.create_if_absent(f"q/../../{other_container}/queue.json", b"{}")
    assert _blob_names(azurite_server, other_container) == []
    assert _blob_names(azurite_server, azure_container) == []


def test_gcs_prefix_with_dot_segments_is_refused(gcs_server: GCSServer) -> None:
    with pytest.raises(InvalidRequest, match="segment"):
        store_from_url(f"gs://b/../other?endpoint={gcs_server.endpoint}")


# -- etags that name no single version ------------------------------------------

@pytest.mark.parametrize("etag", ["", "*", ' * ', '"0x1", "0x2"'])
def test_azure_etag_naming_no_single_version_is_a_conflict(azure_url: str, etag: str) -> None:
    """'*' matched any blob (an unconditional overwrite); '' escaped as a ValueError."""
    store = store_from_url(azure_url)
    first = store.create_if_absent("q/queue.json", b"1")
    with pytest.raises(Conflict):
        store.write_if_match("q/queue.json", b"2", etag)
    assert store.read("q/queue.json") == Versioned(b"1", first)


# -- 409s that no re-read or retry cures ----------------------------------------

def test_azure_delete_of_a_blob_with_snapshots_is_refused_not_a_conflict(
        azurite_server: AzuriteServer, azure_url: str, azure_container: str) -> None:
    store = store_from_url(azure_url)
    store.put("q/staging/w.jsonl", b"x")
    client = ContainerClient.from_connection_string(azurite_server.connection_string,
                                                    azure_container)
    with client:
        client.get_blob_client("queues/q/staging/w.jsonl").create_snapshot()
    with pytest.raises(StorageRefused, match="SnapshotsPresent"):
        store.delete("q/staging/w.jsonl")
    assert store.get("q/staging/w.jsonl") == b"x"


class _Answer409(BaseHTTPRequestHandler):
    """Answers every request 409 BlobImmutableDueToPolicy, as a WORM container does."""

    protocol_version = "HTTP/1.1"
    seen: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen.append(self.command)
        body = (b'<?xml version="1.0" encoding="utf-8"?><Error><Code>BlobImmutableDueToPolicy'
                b"</Code><Message>This operation is not permitted as the blob is immutable "
                b"due to a policy.</Message></Error>")
        self.send_response(409)
        self.send_header("x-ms-error-code", "BlobImmutableDueToPolicy")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_DELETE = _answer


@pytest.fixture()
def immutable_endpoint() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Answer409,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/acct", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_azure_write_refused_by_a_policy_is_refused_not_a_conflict(
        immutable_endpoint: tuple[str, list[str]]) -> None:
    """As a Conflict the commit loop re-read and wrote again, without backoff, for its
    whole batch timeout, then answered OutcomeUnknown; it is a refusal, sent once."""
    endpoint, seen = immutable_endpoint
    store = AzureStore("c", "q", account_url=endpoint,
                       credential=AzureNamedKeyCredential("acct", "a2V5"), retries=3)
    with pytest.raises(StorageRefused, match="BlobImmutableDueToPolicy"):
        store.write_if_match("q/queue.json", b"2", '"0x1"')
    assert seen == ["PUT"]


# -- SDK errors on an error's chain ---------------------------------------------

def test_azure_errors_keep_no_sdk_error_holding_the_sas(
        azurite_server: AzuriteServer, azure_container: str, account_sas: str) -> None:
    store = AzureStore(azure_container, "q", account_url=azurite_server.endpoint,
                       credential=AzureSasCredential(account_sas))
    first = store.create_if_absent("queue.json", b"1")
    store.write_if_match("queue.json", b"2", first)
    with pytest.raises(Conflict) as info:
        store.write_if_match("queue.json", b"3", first)
    signature = account_sas.split("sig=")[1].split("&")[0]
    assert [type(e) for e in _chain(info.value)] == [Conflict]
    assert signature not in repr(pickle.loads(pickle.dumps(info.value)).__dict__)
    assert store.read("queue.json").data == b"2"


def test_gcs_errors_keep_no_sdk_error_holding_the_upload_url(gcs_server: GCSServer) -> None:
    """The SDK's error for the last step of a resumable upload quotes the session URL
    (a capability to finish that upload); it stayed on the StorageUnavailable's chain."""
    bucket = f"b-edges-{datetime.datetime.now().strftime('%H%M%S%f')}"
    gcs_server.create_bucket(bucket)
    store = GCSStore(bucket, "p", endpoint_url=gcs_server.endpoint, retries=1)
    try:
        first = store.create_if_absent("queue.json", b"1")
        gcs_server.inject(503, method="PUT")
        with pytest.raises(StorageUnavailable) as info:
            store.write_if_match("queue.json", b"x" * (9 * 1024 * 1024), first)
        sessions = list(gcs_server.state.uploads)
        assert sessions, "the upload's session was started and never finished"
        chain = _chain(info.value)
        assert [type(e) for e in chain] == [StorageUnavailable]
        shown = " ".join(f"{e!r} {e}" for e in chain)
        shown += repr(pickle.loads(pickle.dumps(info.value)).__dict__)
        assert not [s for s in sessions if s in shown]
        assert store.read("queue.json") == Versioned(b"1", first)
    finally:
        store.close()
