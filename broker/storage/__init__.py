"""Object stores with compare-and-set: memory, local files and S3.

``store_from_url`` turns a store URL into a store:

* ``file:///abs/dir`` -> :class:`FileStore`
* ``s3://bucket/prefix`` -> :class:`S3Store` (``?endpoint=http://host:port``
  may name an S3-compatible endpoint; otherwise ``AWS_ENDPOINT_URL``)
* ``memory://name`` -> a process-wide :class:`MemoryStore` of that name
"""

from __future__ import annotations

import threading
from urllib.parse import parse_qs, urlsplit

from broker.errors import InvalidRequest
from broker.storage.base import Data, ObjectStore, Versioned, as_bytes, data_len
from broker.storage.files import FileStore
from broker.storage.memory import MemoryStore
from broker.storage.s3 import S3Store

__all__ = [
    "Data",
    "FileStore",
    "MemoryStore",
    "ObjectStore",
    "S3Store",
    "Versioned",
    "as_bytes",
    "data_len",
    "store_from_url",
]

_memory_stores: dict[str, MemoryStore] = {}
_memory_lock = threading.Lock()


def store_from_url(url: str, *, endpoint_url: str | None = None) -> ObjectStore:
    """Open the store a URL names. Raises ``InvalidRequest`` for an unknown scheme."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidRequest(f"file store URLs need an absolute path: file:///dir, got {url!r}")
        if not parts.path.startswith("/"):
            raise InvalidRequest(f"file store URLs need an absolute path: file:///dir, got {url!r}")
        return FileStore(parts.path)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise InvalidRequest(f"S3 store URLs look like s3://bucket/prefix, got {url!r}")
        query = parse_qs(parts.query)
        endpoint = endpoint_url or next(iter(query.get("endpoint", [])), None)
        return S3Store(parts.netloc, parts.path.strip("/"), endpoint_url=endpoint)
    if parts.scheme == "memory":
        name = parts.netloc or parts.path or "default"
        with _memory_lock:
            return _memory_stores.setdefault(name, MemoryStore(name))
    shown = f"{parts.scheme}://" if parts.scheme else url[:40]
    raise InvalidRequest(
        f"unknown store URL {shown!r}: use file:///abs/dir or s3://bucket/prefix"
    )
