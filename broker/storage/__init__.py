"""Object stores with compare-and-set: memory, local files, S3 and Google Cloud Storage.

``store_from_url`` turns a store URL into a store:

* ``file:///abs/dir`` -> :class:`FileStore`; refused on FUSE and network
  mounts (:mod:`broker.storage.mounts`). Query option ``trust_mount=<fstype>``
  accepts one such filesystem type anyway, with a warning.
* ``s3://bucket/prefix`` -> :class:`S3Store`. Query options:
  ``endpoint=http://host:port`` (an S3-compatible endpoint; otherwise
  ``AWS_ENDPOINT_URL``), ``region=`` (otherwise ``AWS_REGION``),
  ``timeout_s=`` (connect and read timeout in seconds, default 10) and
  ``retries=`` (attempts per call for transient failures, default 5).
  Any other option is refused with ``InvalidRequest``.
* ``gs://bucket/prefix`` -> :class:`broker.storage.gcs.GCSStore` (the ``gcp`` extra:
  ``pip install 'osqueue-spark[gcp]'``). Query options: ``endpoint=`` (a GCS JSON-API
  endpoint; otherwise ``STORAGE_EMULATOR_HOST``), ``timeout_s=`` and ``retries=`` as
  for S3. Any other option is refused with ``InvalidRequest``.
* ``memory://name`` -> a process-wide :class:`MemoryStore` of that name
* ``abfss://container@account.dfs.core.windows.net/prefix`` or
  ``az://container/prefix`` (the account from ``AZURE_STORAGE_CONNECTION_STRING``
  or ``AZURE_STORAGE_ACCOUNT``) -> :class:`~broker.storage.azure.AzureStore`
  (the ``azure`` extra). Query options ``endpoint=`` (the Blob endpoint, e.g.
  Azurite's), ``timeout_s=`` and ``retries=`` as for S3; credentials only from
  the environment (see :mod:`broker.storage.azure`).

Credentials never go in a store URL: a user or password before the host, or in an
``endpoint=`` option or ``endpoint_url``, is refused with ``InvalidRequest`` (and
not repeated); every message quotes the URL as :func:`shown_url` shows it.
"""

from __future__ import annotations

import threading
from urllib.parse import SplitResult, parse_qs, urlsplit

from broker.errors import InvalidRequest, StorageRefused
from broker.storage.base import Data, ObjectStore, Versioned, as_bytes, data_len
from broker.storage.files import FileStore
from broker.storage.memory import MemoryStore
from broker.storage.s3 import S3Store
from broker.storage.urlopts import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    positive,
    query_options,
    refuse_user_info,
    shown_url,
)

__all__ = [
    "Data",
    "FileStore",
    "MemoryStore",
    "ObjectStore",
    "S3Store",
    "Versioned",
    "as_bytes",
    "data_len",
    "shown_url",
    "store_from_url",
]

_S3_OPTIONS = ("endpoint", "region", "retries", "timeout_s")
_GCS_OPTIONS = ("endpoint", "retries", "timeout_s")

_memory_stores: dict[str, MemoryStore] = {}
_memory_lock = threading.Lock()


def store_from_url(url: str, *, endpoint_url: str | None = None) -> ObjectStore:
    """Open the store a URL names. Raises ``InvalidRequest`` for an unknown scheme, a
    malformed URL or one carrying credentials (user info, or in an endpoint)."""
    parts = _split(url)
    refuse_user_info(parts)
    _refuse_endpoint_user_info(endpoint_url)
    shown = shown_url(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise InvalidRequest(
                f"file store URLs need an absolute path: file:///dir, got {shown!r}")
        return FileStore(parts.path, trust_mount=_file_options(parts.query).get("trust_mount"))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise InvalidRequest(f"S3 store URLs look like s3://bucket/prefix, got {shown!r}")
        opts = query_options(parts.query, _S3_OPTIONS, "S3")
        _refuse_endpoint_user_info(opts.get("endpoint"))
        return S3Store(parts.netloc, parts.path.strip("/"),
                       endpoint_url=endpoint_url or opts.get("endpoint") or None,
                       region_name=opts.get("region") or None,
                       retries=positive(opts, "retries", int, DEFAULT_RETRIES),
                       timeout_s=positive(opts, "timeout_s", float, DEFAULT_TIMEOUT_S))
    if parts.scheme in ("az", "abfss"):
        return _azure_store(url)
    if parts.scheme == "gs":
        return _gcs_store(parts, endpoint_url)
    if parts.scheme == "memory":
        name = parts.netloc or parts.path or "default"
        with _memory_lock:
            return _memory_stores.setdefault(name, MemoryStore(name))
    raise InvalidRequest(
        f"unknown store URL {shown!r}: use file:///abs/dir, s3://bucket/prefix, "
        "gs://bucket/prefix or abfss://container@account.dfs.core.windows.net/prefix"
    )


def _split(url: str) -> SplitResult:
    """``url``'s parts; ``InvalidRequest`` (not quoting it) if it cannot be parsed."""
    try:
        return urlsplit(url)
    except ValueError:
        raise InvalidRequest("malformed store URL (not repeated here): a stray '[' or ']' "
                             "in its host?") from None


def _refuse_endpoint_user_info(endpoint: str | None) -> None:
    if endpoint:
        refuse_user_info(_split(endpoint), "store endpoints")


def _azure_store(url: str) -> ObjectStore:
    """The Azure store a URL names; the SDK is imported only now (the ``azure`` extra)."""
    try:
        from broker.storage.azure import azure_store_from_url
    except ImportError as exc:
        raise StorageRefused(
            f"Azure store URLs need the Azure SDK ({exc.name} is missing): "
            "pip install 'osqueue-spark[azure]'"
        ) from None
    return azure_store_from_url(url)


def _gcs_store(parts: SplitResult, endpoint_url: str | None) -> ObjectStore:
    """A GCSStore for a ``gs://`` URL; ``StorageRefused`` if the gcp extra is missing."""
    if not parts.netloc:
        raise InvalidRequest(
            f"GCS store URLs look like gs://bucket/prefix, got {shown_url(parts.geturl())!r}")
    opts = query_options(parts.query, _GCS_OPTIONS, "GCS")
    _refuse_endpoint_user_info(opts.get("endpoint"))
    try:
        from broker.storage.gcs import GCSStore
    except ImportError as exc:
        raise StorageRefused(
            f"gs:// store URLs need the Google Cloud Storage client ({exc.name} is missing): "
            "pip install 'osqueue-spark[gcp]'") from None
    return GCSStore(parts.netloc, parts.path.strip("/"),
                    endpoint_url=endpoint_url or opts.get("endpoint") or None,
                    retries=positive(opts, "retries", int, DEFAULT_RETRIES),
                    timeout_s=positive(opts, "timeout_s", float, DEFAULT_TIMEOUT_S))


def _file_options(query: str) -> dict[str, str]:
    """The file URL's query options: only ``trust_mount``."""
    parsed = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(parsed) - {"trust_mount"})
    if unknown or any(len(v) > 1 or not v[0] for v in parsed.values()):
        raise InvalidRequest(
            f"bad file store URL option(s) {', '.join(unknown or parsed)}; the one option "
            "is trust_mount=<filesystem type>, given once")
    return {name: values[0] for name, values in parsed.items()}
