"""The one small storage interface every backend implements.

Two kinds of object live in a store:

* **CAS objects** (the queue state): ``read`` gives ``(bytes, etag)``;
  ``write_if_match`` and ``create_if_absent`` are the only ways to change
  them, and each either lands atomically or raises :class:`Conflict`.
* **Plain objects** (archive files, staging): ``put``/``get``/``list``/``delete``.

Keys are ``/``-separated paths relative to the store's root or prefix.
Every method is synchronous and thread-safe. Failure modes: ``NotFound`` for
a missing object, ``Conflict`` for a lost conditional write,
``StorageUnavailable`` when the outcome is unknown (timeout, 5xx after
retries): a write that raised it may or may not have landed.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from broker.errors import Conflict, NotFound, UnsafeStore

#: What a write takes: bytes, or chunks of bytes written in order (saves
#: joining a large object only to write it).
Data = bytes | Sequence[bytes]


def as_bytes(data: Data) -> bytes:
    return data if isinstance(data, bytes) else b"".join(data)


def data_len(data: Data) -> int:
    return len(data) if isinstance(data, bytes) else sum(map(len, data))


@dataclass(frozen=True, slots=True)
class Versioned:
    """An object's bytes and the etag that a conditional write must present."""

    data: bytes
    etag: str


class ObjectStore(abc.ABC):
    """Compare-and-set object storage. See the module docstring for the contract."""

    #: A URL naming the store, safe to log (never holds credentials).
    url: str

    @abc.abstractmethod
    def read(self, key: str) -> Versioned:
        """Return the object's bytes and etag; raise ``NotFound`` if absent."""

    @abc.abstractmethod
    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        """Replace the object only if its etag is still ``etag``; return the new etag.

        Raises ``Conflict`` if the object changed or vanished since it was read.
        The new etag differs from every earlier one, even if ``data`` repeats.
        """

    @abc.abstractmethod
    def create_if_absent(self, key: str, data: Data) -> str:
        """Create the object only if no object has that key; return its etag.

        Raises ``Conflict`` if it exists.
        """

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write a plain object unconditionally (archive files)."""

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Return a plain object's bytes; raise ``NotFound`` if absent."""

    @abc.abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Return the keys that start with ``prefix``, sorted."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove an object; a missing object is not an error."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default has nothing to release."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def settle(self) -> None:  # noqa: B027 (optional hook, not abstract)
        """Wait for background clean-up (a no-op unless the store has some)."""

    def self_test(self) -> None:
        """Prove the store refuses stale and duplicate conditional writes.

        Writes and removes one probe object under ``_osqueue/selftest/``.
        Raises :class:`UnsafeStore` if a conditional write that must fail
        succeeds: running on such a store would silently lose jobs.
        """
        key = f"_osqueue/selftest/{uuid.uuid4().hex}"
        try:
            first = self.create_if_absent(key, b"probe-1")
            self.write_if_match(key, b"probe-2", first)
            for attempt in (
                lambda: self.write_if_match(key, b"probe-3", first),
                lambda: self.create_if_absent(key, b"probe-4"),
            ):
                try:
                    attempt()
                except Conflict:
                    continue
                raise UnsafeStore(
                    f"store {self.url} accepted a conditional write that must be refused; "
                    "it does not honour If-Match / If-None-Match, so osqueue will not run on it"
                )
            if self.read(key).data != b"probe-2":
                raise UnsafeStore(f"store {self.url} changed an object on a refused write")
        finally:
            try:
                self.delete(key)
            except NotFound:
                pass
