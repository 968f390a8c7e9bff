"""An in-memory store for unit tests and benchmarks; nothing survives the process."""

from __future__ import annotations

import itertools
import threading

from broker.errors import Conflict, NotFound
from broker.storage.base import Data, ObjectStore, Versioned, as_bytes


class MemoryStore(ObjectStore):
    """Thread-safe dict of key -> (bytes, etag); etags come from a counter."""

    etags_differ_on_same_bytes = True
    shared_across_processes = False  # one process's dict

    def __init__(self, name: str = "default") -> None:
        self.url = f"memory://{name}"
        self._lock = threading.Lock()
        self._objects: dict[str, Versioned] = {}
        self._counter = itertools.count(1)

    def _new_etag(self) -> str:
        return f"m{next(self._counter)}"

    def read(self, key: str) -> Versioned:
        with self._lock:
            try:
                return self._objects[key]
            except KeyError:
                raise NotFound(f"no object {key!r} in {self.url}") from None

    def head(self, key: str) -> str:
        return self.read(key).etag

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        with self._lock:
            current = self._objects.get(key)
            if current is None or current.etag != etag:
                raise Conflict(f"object {key!r} changed since it was read")
            new = self._new_etag()
            self._objects[key] = Versioned(as_bytes(data), new)
            return new

    def create_if_absent(self, key: str, data: Data) -> str:
        with self._lock:
            if key in self._objects:
                raise Conflict(f"object {key!r} already exists")
            new = self._new_etag()
            self._objects[key] = Versioned(as_bytes(data), new)
            return new

    def put(self, key: str, data: bytes) -> str:
        with self._lock:
            etag = self._new_etag()
            self._objects[key] = Versioned(bytes(data), etag)
            return etag

    def get(self, key: str) -> bytes:
        return self.read(key).data

    def list(self, prefix: str) -> list[str]:
        with self._lock:
            return sorted(k for k in self._objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)
