"""The Azure store beyond the shared contract: URL forms and options, the credential
chain, error classification against Azurite (leases, missing containers, bad keys,
timeouts) and that no key or SAS ever shows in a repr, an error or a log line."""

from __future__ import annotations

import base64
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.storage.blob import BlobClient

from broker.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    OsqueueError,
    StorageRefused,
    StorageUnavailable,
)
from broker.storage import Versioned, store_from_url
from broker.storage.azure import AzureStore
from tests.support.azuriteserver import AZURITE_VERSION, AzuriteServer
from tests.support.faultproxy import FaultConfig, FaultProxy

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Azure credentials in the environment (restored after the test)."""
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT",
                 "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture()
def unanswering_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield int(server.getsockname()[1])


def test_abfss_url_with_the_connection_strings_account_reaches_azurite(
        azurite_server: AzuriteServer, azure_container: str) -> None:
    url = f"abfss://{azure_container}@{azurite_server.account}.dfs.core.windows.net/p/q"
    store = store_from_url(url)
    assert isinstance(store, AzureStore) and store.prefix == "p/q"
    etag = store.create_if_absent("queue.json", b"1")
    # the same blob, seen through the az:// form of the URL
    assert store_from_url(f"az://{azure_container}/p/q").read("queue.json").etag == etag
    store.close()


@pytest.mark.usefixtures("no_azure_env")
def test_abfss_url_names_the_blob_endpoint_and_the_credential_chain(
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = "abfss://cont@acct.dfs.core.windows.net/pre/fix"
    store = store_from_url(url)
    assert isinstance(store, AzureStore)
    assert store._client.url == "https://acct.blob.core.windows.net/cont"
    assert store.url == "az://cont/pre/fix at https://acct.blob.core.windows.net"
    from azure.identity import DefaultAzureCredential

    assert isinstance(store._client.credential, DefaultAzureCredential)
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", "?sv=2024-11-04&sig=s3cr3tsig")
    sas = store_from_url(url)
    assert isinstance(sas, AzureStore) and isinstance(sas._client.credential, AzureSasCredential)
    monkeypatch.setenv("AZURE_STORAGE_KEY", "a2V5a2V5")
    keyed = store_from_url(url)
    assert isinstance(keyed, AzureStore)
    assert keyed._client.credential.account_name == "acct"
    sovereign = store_from_url("abfss://c0n@acct.dfs.core.chinacloudapi.cn/")
    assert isinstance(sovereign, AzureStore)
    assert sovereign._client.url == "https://acct.blob.core.chinacloudapi.cn/c0n"


@pytest.mark.usefixtures("no_azure_env")
def test_az_url_takes_the_account_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidRequest, match="AZURE_STORAGE_ACCOUNT"):
        store_from_url("az://cont/p")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "acct2")
    store = store_from_url("az://cont/p")
    assert isinstance(store, AzureStore)
    assert store._client.url == "https://acct2.blob.core.windows.net/cont"


@pytest.mark.usefixtures("no_azure_env")
@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("az://c0n/p?colour=red&timeout=2", "colour, timeout"),
        ("az://c0n/p?retries=0", "retries='0'"),
        ("az://c0n/p?timeout_s=nan", "timeout_s='nan'"),
        ("az://c0n/p?retries=1&retries=2", "more than once: retries"),
        ("az://c0n/p?endpoint=ftp://h/a", "http(s) URL"),
        ("az:///p", "az://container/prefix"),
        ("abfss://acct.dfs.core.windows.net/p", "abfss://container@account"),
        ("abfss://c0n@example.com/p", "abfss://container@account"),
    ],
)
def test_url_options_and_forms_are_checked(url: str, named: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        store_from_url(url)
    assert named in str(info.value)


@pytest.mark.usefixtures("no_azure_env")
@pytest.mark.parametrize(
    "url",
    [
        "az://c0n/p?sv=2024-11-04&sig=TOPSECRETSIG",
        "az://c0n/p?endpoint=https://acct.blob.core.windows.net/?sv=1%26sig=TOPSECRETSIG",
        "abfss://c0n:TOPSECRETSIG@acct.dfs.core.windows.net/p",
    ],
)
def test_a_secret_in_the_url_is_refused_without_being_repeated(url: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        store_from_url(url)
    assert "TOPSECRETSIG" not in str(info.value)
    assert "environment" in str(info.value) or "abfss://" in str(info.value)


def _errors_of(store: AzureStore, other_container: str) -> list[OsqueueError]:
    """Every kind of error a store raises against a live Azurite, one call each."""
    errors: list[OsqueueError] = []

    def catch(call: Any) -> None:
        try:
            call()
        except OsqueueError as exc:
            errors.append(exc)
        else:
            raise AssertionError("expected an error")

    first = store.create_if_absent("k", b"1")
    store.write_if_match("k", b"2", first)
    catch(lambda: store.read("missing"))
    catch(lambda: store.create_if_absent("k", b"3"))
    catch(lambda: store.write_if_match("k", b"3", first))
    catch(lambda: store_from_url(f"az://{other_container}x/p").head("k"))
    return errors


def test_no_key_or_sas_in_reprs_errors_or_logs(
        azurite_server: AzuriteServer, azure_url: str, azure_container: str,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        unanswering_port: int) -> None:
    caplog.set_level(logging.DEBUG)
    secrets = [azurite_server.key]
    store = store_from_url(azure_url)
    assert isinstance(store, AzureStore)
    errors = _errors_of(store, azure_container)
    assert [type(e) for e in errors] == [NotFound, Conflict, Conflict, StorageRefused]
    # a wrong key: Azurite answers 403
    wrong = base64.b64encode(os.urandom(64)).decode()
    secrets.append(wrong)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       azurite_server.connection_string.replace(azurite_server.key, wrong))
    denied = store_from_url(azure_url)
    with pytest.raises(StorageRefused, match="denied") as info:
        denied.read("k")
    errors.append(info.value)
    # a SAS from the environment that Azurite refuses
    sas_sig = "c2FzU2VjcmV0U2lnbmF0dXJl"
    secrets.append(sas_sig)
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", f"sv=2024-11-04&sp=rw&sig={sas_sig}")
    sas_store = store_from_url(f"az://{azure_container}/q?endpoint={azurite_server.endpoint}")
    with pytest.raises(StorageRefused) as info:
        sas_store.read("k")
    errors.append(info.value)
    # a SAS inside the connection string: the SDK puts it in every request URL
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       f"BlobEndpoint={azurite_server.endpoint};"
                       f"SharedAccessSignature=sv=2024-11-04&sp=rw&sig={sas_sig}")
    sas_conn = store_from_url(azure_url)
    with pytest.raises(StorageRefused) as info:
        sas_conn.read("k")
    errors.append(info.value)
    # a timeout, with the key from the connection string
    monkeypatch.delenv("AZURE_STORAGE_SAS_TOKEN")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite_server.connection_string)
    slow = store_from_url(f"az://{azure_container}/q?endpoint=http://127.0.0.1:"
                          f"{unanswering_port}/{azurite_server.account}&timeout_s=0.3&retries=1")
    with pytest.raises(StorageUnavailable) as info:
        slow.read("k")
    errors.append(info.value)
    # a connection string the SDK cannot use (no account name)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", f"AccountKey={azurite_server.key}")
    with pytest.raises(StorageRefused, match="cannot set up") as info:
        store_from_url(azure_url)
    errors.append(info.value)
    shown = [repr(s) + s.url for s in (store, denied, sas_store, sas_conn, slow)]
    shown += [f"{e!r} {e} {e.to_dict()}" for e in errors]
    shown += [record.getMessage() for record in caplog.records]
    assert caplog.records, "the SDK's request log is on: it must be checked too"
    for secret in secrets:
        assert not [text for text in shown if secret in text]


def test_a_lease_is_refused_not_a_conflict(azure_url: str, azure_container: str) -> None:
    """Azure answers 412 LeaseIdMissing for a leased blob: no re-read will help."""
    store = store_from_url(azure_url)
    assert isinstance(store, AzureStore)
    etag = store.create_if_absent("q/queue.json", b"1")
    blob: BlobClient = store._client.get_blob_client("queues/q/queue.json")
    lease = blob.acquire_lease(lease_duration=-1)
    try:
        with pytest.raises(StorageRefused, match="lease"):
            store.write_if_match("q/queue.json", b"2", etag)
    finally:
        lease.break_lease()
    assert store.read("q/queue.json").data == b"1"


class _NoToken:
    """An injected fault: a token credential that has no token to give (what
    DefaultAzureCredential raises with no identity around)."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.identity import CredentialUnavailableError

        raise CredentialUnavailableError("no identity here")

    def get_token_info(self, *scopes: str, **kwargs: Any) -> Any:
        return self.get_token(*scopes)


def test_missing_credentials_are_refused_naming_the_fix(unanswering_port: int) -> None:
    store = AzureStore("c0n", account_url=f"https://127.0.0.1:{unanswering_port}",
                       credential=_NoToken(), retries=3)
    with pytest.raises(StorageRefused, match="AZURE_STORAGE_CONNECTION_STRING") as info:
        store.read("k")
    assert "no identity here" not in str(info.value)


def test_the_timeout_option_bounds_each_request(unanswering_port: int,
                                                azurite_server: AzuriteServer) -> None:
    store = store_from_url(f"az://c0n/p?endpoint=http://127.0.0.1:{unanswering_port}/"
                           f"{azurite_server.account}&timeout_s=0.3&retries=2")
    assert isinstance(store, AzureStore) and (store.timeout_s, store.retries) == (0.3, 2)
    started = time.monotonic()
    with pytest.raises(StorageUnavailable):
        store.head("q/queue.json")
    assert time.monotonic() - started < 5  # the default 10 s timeout would take 20 s


def test_transient_errors_are_retried_then_given_up(azurite_server: AzuriteServer,
                                                   azure_container: str) -> None:
    # the fault proxy in front of Azurite answers the next two requests 503
    config = FaultConfig(rate=1.0, weights={"error": 1.0, "error500": 0.0, "error503": 0.0,
                                            "drop": 0.0, "delay": 0.0},
                         error_status=503, error_code="ServerBusy", limit=2)
    credential = AzureNamedKeyCredential(azurite_server.account, azurite_server.key)
    direct = AzureStore(azure_container, account_url=azurite_server.endpoint,
                        credential=credential)
    etag = direct.put("k", b"x")
    with FaultProxy(f"http://{azurite_server.host}:{azurite_server.port}", config=config) \
            as proxy:
        via = f"{proxy.url}/{azurite_server.account}"
        assert AzureStore(azure_container, account_url=via, credential=credential,
                          retries=5).head("k") == etag
        assert proxy.stats()["requests"] == 3
        proxy.configure(limit=None)
        with pytest.raises(StorageUnavailable, match="HTTP 503"):
            AzureStore(azure_container, account_url=via, credential=credential,
                       retries=3).head("k")
        assert proxy.stats()["requests"] == 6
    assert direct.read("k") == Versioned(b"x", etag)


def test_without_the_sdk_the_url_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "broker.storage.azure")
    monkeypatch.setitem(sys.modules, "azure.storage.blob", None)
    with pytest.raises(StorageRefused, match=re.escape("osqueue-spark[azure]")):
        store_from_url("az://c0n/p")


def test_the_makefile_installs_the_azurite_the_tests_expect() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert f"AZURITE_VERSION := {AZURITE_VERSION}\n" in makefile
    assert "suite: $(STAMP) java-check $(AZURITE_STAMP)" in makefile


def test_a_missing_azurite_names_make_test(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    from tests.support.azuriteserver import AzuriteMissing, azurite_command

    monkeypatch.setenv("AZURITE_BLOB", str(tmp_path / "no-azurite-blob"))
    with pytest.raises(AzuriteMissing, match="`make test` installs it"):
        azurite_command()
