"""Google Cloud Storage store: compare-and-set on the object generation.

Every version of a GCS object has a **generation**, a number GCS never gives the
same object name twice (not even after a delete). The etag this store returns is
that generation as text; ``write_if_match`` sends ``ifGenerationMatch=<generation>``
and ``create_if_absent`` sends ``ifGenerationMatch=0`` ("no live object"). Since
generations never repeat, writing the same bytes again gives a new etag
(``etags_differ_on_same_bytes`` is True: no A-B-A, unlike S3's MD5 etags). ``read``
is one media ``GET`` whose ``X-Goog-Generation`` header names the version of the
bytes it carries; ``head`` is a metadata ``GET`` (no body). Answers map to errors:

* 412 (a generation precondition failed) and 409: :class:`Conflict`. An etag that
  is not a generation (not a whole number > 0) cannot match and is refused at once.
* 404 for an object: :class:`NotFound`; for the bucket: :class:`StorageRefused`
  (after ``read``, ``head`` or ``get`` find nothing, one ``GET`` of the bucket
  tells a missing object from a missing bucket).
* 401, 403 and other 3xx/4xx, and credentials that cannot be found or refreshed:
  :class:`StorageRefused`, raised at once: nothing was written.
* 408, 429 (GCS documents an update limit of about once per second on each
  object, and throttles writes past it), 5xx, connection errors, timeouts and a
  checksum mismatch are retried with exponential backoff (tenacity; the SDK's own
  retries are off); when ``retries`` attempts are used up the call raises
  :class:`StorageUnavailable` and, for a write, the outcome is unknown. A
  conditional write whose answer was lost and that is then retried gets 412 if
  the first attempt had landed: callers re-read, as with S3 (see
  :mod:`broker.commit.verdict`).

Credentials come from Google's Application Default Credentials chain
(``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth application-default login``,
or the service account of the machine through the metadata server: GCE, GKE,
Cloud Run, a Databricks on Google Cloud cluster given one). As the SDK does,
``STORAGE_EMULATOR_HOST`` points the client at an emulator with anonymous
credentials; so does an explicit ``http://`` endpoint, since a token must never
travel unencrypted. The store's ``url`` and every
message name only bucket, prefix, endpoint host and the server's error reason,
never a credential or a request URL (a resumable upload's URL is itself a
capability).

Why the official ``google-cloud-storage`` SDK (the ``gcp`` extra): it speaks the
JSON API, takes ``if_generation_match`` on every upload, download and delete
exactly as the API defines it, and reports the generation of what it wrote or
read, so the compare-and-set above is a direct call, not an emulation. It finds
credentials through ``google.auth.default`` and honours ``STORAGE_EMULATOR_HOST``,
the two conventions the issue asks the store to share with Google's tools. A
single library over all three clouds (``obstore``) would replace boto3, which the
project's brief names for S3, or sit beside it as a second S3 client, and would
put its own error and retry layer between us and the 412/429/5xx split above; the
SDK is imported only by this module, so the core install stays small.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import google.auth
import requests
from google.api_core.exceptions import GoogleAPICallError
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.exceptions import (
    DefaultCredentialsError,
    GoogleAuthError,
    InvalidOperation,
    RefreshError,
)
from google.auth.transport.requests import AuthorizedSession
from google.cloud import storage
from google.cloud.storage.exceptions import DataCorruption, InvalidResponse

from broker.errors import (
    Conflict,
    NotFound,
    StorageError,
    StorageRefused,
    StorageUnavailable,
    UnsafeStore,
)
from broker.storage.base import Data, Versioned, as_bytes
from broker.storage.cloud import CloudStore
from broker.storage.urlopts import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S

T = TypeVar("T")


#: The emulator variable the Google SDKs read (a URL, ``http://host:port``).
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"

_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
_FAILURES = (GoogleAPICallError, requests.RequestException, GoogleAuthError, DataCorruption,
             InvalidResponse)


def _status(exc: Exception) -> int:
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    response = getattr(exc, "response", None)
    return int(getattr(response, "status_code", 0) or 0)


def _server_said(exc: Exception) -> str:
    """The reason and message of a GCS error answer, never the request URL."""
    errors = getattr(exc, "errors", None) or []
    first = errors[0] if errors and isinstance(errors[0], dict) else {}
    if not first:
        response = getattr(exc, "response", None)
        try:
            body = response.json() if response is not None else {}
            error = body.get("error", {}) if isinstance(body, dict) else {}
            first = (error.get("errors") or [{}])[0] | {"message": error.get("message", "")}
        except (ValueError, AttributeError, TypeError):
            first = {}
    reason, message = str(first.get("reason", "")), str(first.get("message", ""))[:200]
    return ": ".join(part for part in (reason, message) if part)


def _classify(exc: Exception, key: str, bucket: str) -> StorageError:
    """Map an SDK, transport or auth error for ``key`` to the storage error the contract
    names. Only the status, the server's reason and message, and class names are shown."""
    where = f"gs://{bucket}"
    if isinstance(exc, InvalidOperation):  # anonymous credentials asked to refresh on a 401
        return StorageRefused(
            f"GCS at the store's endpoint asked for credentials for {key!r} (HTTP 401), and "
            "the store sends none to an emulator (STORAGE_EMULATOR_HOST) or an http:// "
            "endpoint: use an https:// endpoint or Google's")
    if isinstance(exc, DefaultCredentialsError):
        return StorageRefused(
            "no Google credentials found (DefaultCredentialsError): set "
            "GOOGLE_APPLICATION_CREDENTIALS to a service account key file, run "
            "`gcloud auth application-default login`, or run with a service account "
            "on Google Cloud")
    if isinstance(exc, RefreshError):
        if getattr(exc, "retryable", False):
            return StorageUnavailable(f"refreshing the Google credentials failed for {key!r} "
                                      "(RefreshError, retryable)")
        return StorageRefused(
            f"the Google credentials for {where} cannot be refreshed (RefreshError): "
            "check the service account, its key or the metadata server")
    if isinstance(exc, GoogleAPICallError | InvalidResponse):
        status = _status(exc)
        said = _server_said(exc)
        shown = f"HTTP {status}" + (f" {said}" if said else "")
        if status in (409, 412):
            return Conflict(f"object {key!r} changed since it was read ({shown})")
        if status == 404:
            return NotFound(f"no object {key!r}")
        if status in (408, 429) or status >= 500 or status == 0:
            return StorageUnavailable(f"GCS answered {shown} for {key!r}")
        if status in (401, 403):
            return StorageRefused(
                f"GCS denied access to {key!r} in {where}: {shown}; check the credentials "
                "and the service account's permissions (roles/storage.objectAdmin)")
        return StorageRefused(f"GCS refused the request for {key!r} in {where}: {shown}")
    if isinstance(exc, DataCorruption):
        return StorageUnavailable(f"GCS data for {key!r} failed its checksum (DataCorruption)")
    return StorageUnavailable(f"GCS request for {key!r} failed: {type(exc).__name__}")


def _generation(etag: str) -> int | None:
    """The generation an etag names, or None if it names none (it cannot match)."""
    try:
        gen = int(etag)
    except ValueError:
        return None
    return gen if gen > 0 and str(gen) == etag else None


def _endpoint(endpoint_url: str | None) -> tuple[str | None, bool]:
    """The API endpoint (None: Google's) and whether to send no credentials."""
    if endpoint_url:
        return endpoint_url.rstrip("/"), urlsplit(endpoint_url).scheme == "http"
    emulator = os.environ.get(EMULATOR_ENV, "").strip()
    if emulator:
        if "://" not in emulator:
            emulator = f"http://{emulator}"
        return emulator.rstrip("/"), True
    return None, False


class GCSStore(CloudStore):
    """Objects under ``gs://bucket/prefix``.

    ``endpoint_url`` replaces Google's endpoint (otherwise ``STORAGE_EMULATOR_HOST``
    if set); ``retries`` is the number of attempts per call (at least 1) for
    transient failures; ``timeout_s`` (seconds) bounds connecting and each read of
    an answer. ``credentials`` replaces Application Default Credentials. Raises
    ``StorageRefused`` if no credentials can be found. One client (thread-safe, as
    the SDK documents: a pool of up to 64 connections) serves every thread.
    """

    etags_differ_on_same_bytes = True  # generations never repeat
    shared_across_processes = True
    failures = _FAILURES

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        retries: int = DEFAULT_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        credentials: Credentials | None = None,
    ) -> None:
        self.bucket = bucket
        endpoint, anonymous = _endpoint(endpoint_url)
        where = urlsplit(endpoint or "")
        #: The endpoint the client talks to (None: Google's), without any user info.
        self.endpoint = (f"{where.scheme}://{where.netloc.rpartition('@')[2]}"
                         if endpoint else None)
        super().__init__("gs", bucket, prefix, retries=retries, timeout_s=timeout_s,
                         endpoint=where.netloc.rpartition("@")[2] if endpoint else None)
        project: str | None = None
        if credentials is None:
            if anonymous:
                credentials = AnonymousCredentials()
            else:
                try:
                    credentials, project = google.auth.default(scopes=_SCOPES)
                except GoogleAuthError as exc:
                    raise _classify(exc, "", bucket) from None
        session = AuthorizedSession(credentials, refresh_timeout=timeout_s)
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=64,
                                                max_retries=0)
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        self._client = storage.Client(
            project=project, credentials=credentials, _http=session,
            client_options={"api_endpoint": endpoint} if endpoint else None)
        # The SDK fetches each bucket's metadata on a thread of its own, for tracing
        # attributes, outside the timeouts and retries here: no requests but ours.
        self._client._bucket_metadata_cache = None
        self._bucket = self._client.bucket(bucket)
        self._closed = threading.Event()

    def __repr__(self) -> str:
        return f"GCSStore({self.url!r})"

    def self_test(self) -> None:
        """:meth:`~broker.storage.base.ObjectStore.self_test`, its refusal naming what GCS
        must honour."""
        try:
            super().self_test()
        except UnsafeStore as exc:
            raise UnsafeStore(
                f"{exc.message}. GCS: this store's writes carry ifGenerationMatch=<generation> "
                "(ifGenerationMatch=0 to create), and the endpoint did not enforce it (the "
                "PyPI gcp-storage-emulator does not); use real GCS or a server that enforces "
                "generation preconditions") from None

    def _error(self, exc: Exception, key: str) -> StorageError:
        return _classify(exc, key, self.bucket)

    def _not_found(self, key: str) -> NotFound | StorageRefused:
        """``NotFound`` for ``key``, or ``StorageRefused`` if the bucket is what is missing."""
        try:
            self._call("", lambda: self._bucket.reload(timeout=self.timeout_s, retry=None,
                                                       projection="noAcl"))
        except NotFound:
            return StorageRefused(f"GCS bucket gs://{self.bucket} does not exist")
        except StorageError:
            pass
        return NotFound(f"no object {key!r}")

    def _missing_bucket(self, key: str, fn: Callable[[], T]) -> T:
        """Run a write; a 404 answer to it means the bucket is missing."""
        try:
            return self._call(key, fn)
        except NotFound:
            raise StorageRefused(f"GCS bucket gs://{self.bucket} does not exist") from None

    def _upload(self, key: str, body: bytes, if_generation_match: int | None,
                content_type: str) -> str:
        def go() -> str:
            blob = self._bucket.blob(self._key(key))
            blob.upload_from_string(body, content_type=content_type,
                                    if_generation_match=if_generation_match,
                                    timeout=self.timeout_s, retry=None)
            return _etag(blob, key)

        return self._missing_bucket(key, go)

    # -- CAS objects -----------------------------------------------------
    def read(self, key: str) -> Versioned:
        def go() -> Versioned:
            blob = self._bucket.blob(self._key(key))
            data = blob.download_as_bytes(timeout=self.timeout_s, retry=None)
            return Versioned(data, _etag(blob, key))

        try:
            return self._call(key, go)
        except NotFound:
            raise self._not_found(key) from None

    def head(self, key: str) -> str:
        """The object's generation from a metadata ``GET`` (no body is transferred)."""

        def go() -> str:
            blob = self._bucket.blob(self._key(key))
            blob.reload(timeout=self.timeout_s, retry=None, projection="noAcl")
            return _etag(blob, key)

        try:
            return self._call(key, go)
        except NotFound:
            raise self._not_found(key) from None

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        generation = _generation(etag)
        if generation is None:
            raise Conflict(f"object {key!r}: {etag!r} is not a generation, so it cannot match")
        return self._upload(key, as_bytes(data), generation, "application/json")

    def create_if_absent(self, key: str, data: Data) -> str:
        return self._upload(key, as_bytes(data), 0, "application/json")

    # -- plain objects ---------------------------------------------------
    def put(self, key: str, data: bytes) -> str:
        return self._upload(key, data, None, "application/octet-stream")

    def list(self, prefix: str) -> list[str]:
        full = self._key(prefix)

        def go() -> list[str]:
            blobs = self._client.list_blobs(self._bucket, prefix=full, timeout=self.timeout_s,
                                            retry=None, fields="items(name),nextPageToken")
            return self._names(blob.name for blob in blobs)

        return self._missing_bucket(prefix, go)

    def delete(self, key: str) -> None:
        try:
            self._call(key, lambda: self._bucket.blob(self._key(key)).delete(
                timeout=self.timeout_s, retry=None))
        except NotFound:
            pass

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._client.close()


def _etag(blob: Any, key: str) -> str:
    """The generation an answer carried, as text; a server that sends none is no GCS."""
    generation = blob.generation
    if not generation:
        raise StorageRefused(f"the answer for {key!r} carried no object generation; the "
                             "endpoint is not a GCS JSON API")
    return str(generation)
