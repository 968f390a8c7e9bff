"""Azure Blob store using conditional writes on the blob ETag.

``write_if_match`` uploads with ``If-Match: <etag>`` and ``create_if_absent``
with ``If-None-Match: *`` (one Put Blob request each: objects up to
:data:`MAX_SINGLE_PUT` bytes are never split into blocks, so a write lands
whole or not at all); ``head`` is a Get Blob Properties request (no body) and
returns the ``ETag`` exactly as a download does. Azure gives every write a new
ETag, even of the same bytes (``etags_differ_on_same_bytes`` is True; the
contract test checks the claim). Answers map to errors thus:

* 412 (``ConditionNotMet``) and 409 ``BlobAlreadyExists`` mean "lost the
  race": :class:`Conflict`. Any other 409 (``SnapshotsPresent``,
  ``BlobImmutableDueToPolicy``, ``ContainerBeingDeleted``, ...) is a state of
  the blob or container that no re-read and retry changes:
  :class:`StorageRefused` (as a Conflict the commit loop would re-read and
  write again, without backoff, until its batch timed out).
* An etag that cannot name one version (empty, ``*``, which matches *any*
  blob, or a list) is refused with :class:`Conflict` before any request.
* 404 for a blob: :class:`NotFound`; for the container
  (``ContainerNotFound``): :class:`StorageRefused`, since no retry creates it.
* 401/403 (bad key or SAS, missing role), credentials that cannot be had,
  a lease on the blob (412 ``LeaseIdMissing``: osqueue never takes leases,
  so it stays until someone breaks it), and other 3xx/4xx: :class:`StorageRefused`, raised at
  once: nothing was written.
* 408, 429, 5xx, connection errors and timeouts are retried with exponential
  backoff (tenacity, like :class:`~broker.storage.s3.S3Store`; the SDK's own
  retries are off); when ``retries`` attempts are used up the call raises
  :class:`StorageUnavailable` and, for a write, the outcome is unknown.

**Why the official SDKs, not obstore.** osqueue needs exactly one primitive
per cloud, "write if the object is still this version", and the error that
tells "lost the race" from "not allowed" from "unknown". ``azure-storage-blob``
exposes the first as ``etag=..., match_condition=MatchConditions.IfNotModified``
and the second as typed errors with the service's status and error code;
``google-cloud-storage`` exposes ``if_generation_match`` the same way. obstore
(the Rust ``object_store`` crate) hides the per-cloud precondition behind one
``PutMode.Update(e_tag, version)`` whose fields "stores use in differing
combinations" (on GCS only the generation works: its maintainers found GCS
ignores ETag preconditions on writes, arrow-rs issue 4879), so the etag our
interface hands around would mean different things per cloud, and its
retries and error mapping happen inside the Rust client where we cannot
classify them as the contract requires. boto3 stays for S3.

**Credentials** (never in the store's ``url``, its repr, logs or errors), in
this order: ``AZURE_STORAGE_CONNECTION_STRING`` (what Azurite uses; only if
its ``AccountName`` is the URL's account, or the URL names none); else
``AZURE_STORAGE_ACCOUNT`` with ``AZURE_STORAGE_KEY`` (account key) or
``AZURE_STORAGE_SAS_TOKEN``, the Azure CLI's variables; else
``DefaultAzureCredential`` from ``azure-identity`` (environment service
principal, workload or managed identity, Azure CLI login). Error messages
show only status codes, error codes and exception class names, never the
SDK's message text (it can quote request headers and URLs); urllib3's debug
log, which quotes request lines, gets a filter that blanks SAS signatures.

Install with ``pip install 'osqueue-spark[azure]'``; the core does not import
this module until a store URL names Azure.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any
from urllib.parse import urlsplit

from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import AzureError, ClientAuthenticationError, HttpResponseError
from azure.storage.blob import ContainerClient

from broker.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    StorageError,
    StorageRefused,
    StorageUnavailable,
)
from broker.storage.base import Data, Versioned, as_bytes
from broker.storage.cloud import CloudStore
from broker.storage.urlopts import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    positive,
    query_options,
    shown_url,
)

#: Largest object written (and read) in one request (bytes): 256 MiB.
MAX_SINGLE_PUT = 256 * 1024 * 1024

#: Query options of an Azure store URL.
URL_OPTIONS = ("endpoint", "retries", "timeout_s")
_CONN_ENV = "AZURE_STORAGE_CONNECTION_STRING"
_LEASE_CODES = frozenset({"LeaseIdMissing", "LeaseIdMismatchWithBlobOperation",
                          "LeaseIdMismatchWithLeaseOperation", "LeaseAlreadyPresent"})


class _RedactSas(logging.Filter):
    """Blanks SAS signatures in urllib3's debug log, which quotes every request line
    (query string included); azure-core's own request log redacts them already."""

    _SIG = re.compile(r"(?i)\b(sig=)[^&\s\"']+")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "sig=" in message.lower():
            record.msg, record.args = self._SIG.sub(r"\1REDACTED", message), ()
        return True


def _redact_sas_in_urllib3_log() -> None:
    """Install :class:`_RedactSas` on urllib3's connection-pool logger, once."""
    target = logging.getLogger("urllib3.connectionpool")
    if not any(isinstance(f, _RedactSas) for f in target.filters):
        target.addFilter(_RedactSas())


_redact_sas_in_urllib3_log()


def _classify(exc: Exception, key: str, where: str) -> StorageError:
    """Map an azure-core error for ``key`` in container ``where`` to the contract's error."""
    if isinstance(exc, ClientAuthenticationError) and exc.status_code is None:
        # The credential could not get a token; its message is not shown.
        return StorageRefused(
            f"no Azure credentials for {where} ({type(exc).__name__}): set "
            f"{_CONN_ENV}, AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or "
            "AZURE_STORAGE_SAS_TOKEN, or sign in (managed identity, az login)"
        )
    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        status = int(exc.status_code)
        # error_code is a str enum for codes the SDK knows, a plain str otherwise.
        raw = getattr(exc, "error_code", None)
        code = str(getattr(raw, "value", raw) or "")
        said = f"{code} (HTTP {status})" if code else f"HTTP {status}"
        if code in _LEASE_CODES:  # 412 or 409, but not a lost race: it stays until broken
            return StorageRefused(
                f"Azure refused {key!r}: {said}; the blob has a lease, which osqueue never "
                "takes: break it"
            )
        if status == 412 or (status == 409 and code in ("BlobAlreadyExists", "")):
            return Conflict(f"object {key!r} changed since it was read ({code or status})")
        if code == "ContainerNotFound":
            return StorageRefused(f"Azure container {where} does not exist ({said})")
        if status == 404:
            return NotFound(f"no object {key!r}")
        if status >= 500 or status in (408, 429):
            return StorageUnavailable(f"Azure answered {said} for {key!r}")
        if status == 409:
            return StorageRefused(
                f"Azure refused {key!r} in {where}: {said}; the blob or container is in a "
                "state that forbids this (snapshots, an immutability policy or legal hold, "
                "a container being deleted): clear it")
        if status in (401, 403):
            return StorageRefused(
                f"Azure denied access to {key!r} in {where}: {said}; check the key, SAS "
                "or the identity's role (Storage Blob Data Contributor)"
            )
        if 300 <= status < 500:
            return StorageRefused(f"Azure refused the request for {key!r}: {said}")
        return StorageUnavailable(f"Azure answered {said} for {key!r}")
    return StorageUnavailable(f"Azure request for {key!r} failed: {type(exc).__name__}")


def _parse_connection_string(conn: str) -> dict[str, str]:
    """``Name=value;...`` as a dict with lower-case names (values may hold '=')."""
    out: dict[str, str] = {}
    for part in conn.split(";"):
        name, sep, value = part.partition("=")
        if sep and name.strip():
            out[name.strip().lower()] = value.strip()
    return out


def _shown_endpoint(url: str) -> str:
    """``scheme://host[:port]/path`` of an endpoint: no user-info, query or fragment."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}".rstrip("/")


class AzureStore(CloudStore):
    """Objects under ``az://container/prefix`` in one storage account.

    ``account_url`` is the Blob endpoint (``https://ACCOUNT.blob.core.windows.net``
    or Azurite's ``http://127.0.0.1:PORT/ACCOUNT``); ``credential`` anything the
    SDK takes (a named key, a SAS, a token credential). With
    ``connection_string`` both come from it instead. ``retries`` is the number
    of attempts per call (at least 1) for transient failures; ``timeout_s``
    (seconds) bounds connecting and each read of the answer. ``client``
    replaces the SDK's container client (tests). Raises ``StorageRefused`` if
    the client cannot be set up (a malformed connection string).
    """

    etags_differ_on_same_bytes = True  # a new ETag per write, whatever the bytes
    shared_across_processes = True
    failures = (AzureError,)

    def __init__(
        self,
        container: str,
        prefix: str = "",
        *,
        account_url: str | None = None,
        credential: Any = None,
        connection_string: str | None = None,
        retries: int = DEFAULT_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        client: Any | None = None,
    ) -> None:
        self.container = container
        options: dict[str, Any] = {
            "connection_timeout": timeout_s,
            "read_timeout": timeout_s,
            "retry_total": 0,  # tenacity does the retrying (CloudStore._call)
            "max_single_put_size": MAX_SINGLE_PUT,
            "max_single_get_size": MAX_SINGLE_PUT,
        }
        if client is None:
            try:
                if connection_string is not None:
                    client = ContainerClient.from_connection_string(
                        connection_string, container, **options)
                elif account_url:
                    client = ContainerClient(account_url, container, credential=credential,
                                             **options)
                else:
                    raise ValueError("no account URL")
            except (ValueError, TypeError) as exc:
                # The SDK's message may quote the connection string: not shown.
                raise StorageRefused(
                    f"cannot set up the Azure client for container {container!r}: "
                    f"{type(exc).__name__}; check {_CONN_ENV} or the store URL"
                ) from None
        self._client = client
        endpoint = _shown_endpoint(str(getattr(client, "url", "") or account_url or ""))
        endpoint = endpoint.removesuffix(f"/{container}")
        super().__init__("az", container, prefix, retries=retries, timeout_s=timeout_s,
                         endpoint=endpoint or None)

    def _error(self, exc: Exception, key: str) -> StorageError:
        return _classify(exc, key, self.where)

    def _blob(self, key: str) -> Any:
        return self._client.get_blob_client(self._key(key))

    # -- CAS objects -----------------------------------------------------
    def read(self, key: str) -> Versioned:
        def go() -> Versioned:
            stream = self._blob(key).download_blob()
            return Versioned(stream.readall(), str(stream.properties.etag))

        return self._call(key, go)

    def head(self, key: str) -> str:
        """The blob's ETag from a Get Blob Properties request (no body is transferred)."""
        return self._call(key, lambda: str(self._blob(key).get_blob_properties().etag))

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        if not etag or etag.strip() == "*" or "," in etag:
            # "*" matches any blob (an unconditional overwrite), a list matches any of
            # its members, and the SDK refuses an empty one with a ValueError.
            raise Conflict(f"object {key!r}: {etag!r} names no single version, so it "
                           "cannot match")
        body = as_bytes(data)

        def go() -> str:
            resp = self._blob(key).upload_blob(
                body, overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified)
            return str(resp["etag"])

        try:
            return self._call(key, go)
        except NotFound:
            raise Conflict(f"object {key!r} vanished since it was read") from None

    def create_if_absent(self, key: str, data: Data) -> str:
        body = as_bytes(data)

        def go() -> str:
            resp = self._blob(key).upload_blob(
                body, overwrite=False, match_condition=MatchConditions.IfMissing)
            return str(resp["etag"])

        return self._call(key, go)

    # -- plain objects ---------------------------------------------------
    def put(self, key: str, data: bytes) -> str:
        resp = self._call(key, lambda: self._blob(key).upload_blob(data, overwrite=True))
        return str(resp["etag"])

    def list(self, prefix: str) -> list[str]:
        full = self._key(prefix)

        def go() -> list[str]:
            return self._names(self._client.list_blob_names(name_starts_with=full or None))

        return self._call(prefix, go)

    def delete(self, key: str) -> None:
        try:
            self._call(key, lambda: self._blob(key).delete_blob())
        except NotFound:
            pass

    def close(self) -> None:
        self._client.close()


# -- URLs ----------------------------------------------------------------------

def azure_store_from_url(url: str) -> AzureStore:
    """Open ``abfss://container@account.dfs.core.windows.net/prefix`` or
    ``az://container/prefix`` (the account from the environment).

    Query options: ``endpoint=`` (the Blob endpoint, e.g. Azurite's
    ``http://127.0.0.1:10000/devstoreaccount1``), ``timeout_s=`` (seconds, default
    10) and ``retries=`` (attempts per call, default 5). Raises ``InvalidRequest``
    for a malformed URL or an unknown option (the message never repeats the
    URL's query: it could be a SAS), ``StorageRefused`` if the client cannot be
    set up.
    """
    parts = urlsplit(url)
    shown = shown_url(url)
    opts = _options(parts.query)
    prefix = parts.path.strip("/")
    account: str | None = None
    endpoint = opts.get("endpoint") or None
    account_url: str | None = None  # from an abfss:// host
    if parts.scheme == "abfss":
        container, at, host = parts.netloc.partition("@")
        labels = host.split(".")
        if not at or not container or ":" in container or len(labels) < 4 \
                or labels[1] not in ("dfs", "blob"):
            raise InvalidRequest(
                "Azure store URLs look like abfss://container@account.dfs.core.windows.net/"
                f"prefix, got {shown!r}")
        account = labels[0]
        account_url = f"https://{account}.blob.{'.'.join(labels[2:])}"
    elif parts.scheme == "az":
        container = parts.netloc
        if not container or "@" in container or ":" in container:
            raise InvalidRequest(f"Azure store URLs look like az://container/prefix, got {shown!r}")
    else:
        raise InvalidRequest(f"not an Azure store URL: {parts.scheme}://")
    kwargs: dict[str, Any] = {
        "retries": positive(opts, "retries", int, DEFAULT_RETRIES, "Azure store URL"),
        "timeout_s": positive(opts, "timeout_s", float, DEFAULT_TIMEOUT_S, "Azure store URL"),
    }
    conn = os.environ.get(_CONN_ENV, "").strip()
    settings = _parse_connection_string(conn) if conn else {}
    if settings and account in (None, settings.get("accountname")):
        if endpoint is None:
            return AzureStore(container, prefix, connection_string=conn, **kwargs)
        return AzureStore(container, prefix, account_url=endpoint,
                          credential=_connection_credential(settings), **kwargs)
    account = account or os.environ.get("AZURE_STORAGE_ACCOUNT") or None
    account_url = endpoint or account_url
    if account_url is None:
        if account is None:
            raise InvalidRequest(
                "az:// store URLs take the storage account from the environment: set "
                f"{_CONN_ENV} or AZURE_STORAGE_ACCOUNT, or use "
                "abfss://container@account.dfs.core.windows.net/prefix")
        account_url = f"https://{account}.blob.core.windows.net"
    return AzureStore(container, prefix, account_url=account_url,
                      credential=_env_credential(account), **kwargs)


def _connection_credential(settings: dict[str, str]) -> Any:
    """The key or SAS of a parsed connection string (None: anonymous)."""
    if settings.get("accountkey") and settings.get("accountname"):
        return AzureNamedKeyCredential(settings["accountname"], settings["accountkey"])
    if settings.get("sharedaccesssignature"):
        return AzureSasCredential(settings["sharedaccesssignature"])
    return None


def _env_credential(account: str | None) -> Any:
    """An account key or SAS from the Azure CLI's variables, else DefaultAzureCredential."""
    key = os.environ.get("AZURE_STORAGE_KEY")
    if key and account:
        return AzureNamedKeyCredential(account, key)
    sas = os.environ.get("AZURE_STORAGE_SAS_TOKEN")
    if sas:
        return AzureSasCredential(sas.lstrip("?"))
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise StorageRefused(
            "no Azure credentials: set AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_KEY or "
            "AZURE_STORAGE_SAS_TOKEN, or install azure-identity "
            "(pip install 'osqueue-spark[azure]') for managed identities and az login"
        ) from None
    return DefaultAzureCredential()


def _options(query: str) -> dict[str, str]:
    """The URL's query options; ``InvalidRequest`` names (never the values of) unknown
    or repeated ones, and refuses an ``endpoint=`` that is not a plain http(s) URL."""
    out = query_options(query, URL_OPTIONS, "Azure",
                        " (credentials go in the environment, never the URL)")
    endpoint = out.get("endpoint")
    if endpoint is not None:
        ep = urlsplit(endpoint)
        if ep.scheme not in ("http", "https") or not ep.hostname:
            raise InvalidRequest(
                "Azure store URL option endpoint= must be an http(s) URL of the Blob service")
        if ep.query or "@" in ep.netloc:
            raise InvalidRequest(
                "Azure store URL option endpoint= must not carry credentials (a SAS or "
                "user-info): put them in the environment")
    return out
