"""What the S3, GCS and Azure stores share (:class:`CloudStore`): where their
objects live (a bucket or container, a prefix checked once, the URL messages
quote, which names no credential), how many attempts a call gets and how long
each may take, every SDK call run through :func:`~broker.storage.base.sdk_call`
with the store's own error mapping, and what reads the same on every cloud
(``get``, a listing's names under the prefix).

Each store keeps what differs: its SDK client's construction (credentials,
timeouts and pool in that SDK's terms, the SDK's own retries off: tenacity
retries through ``sdk_call``), its conditional writes, and the mapping of its
SDK's errors to the contract's (:meth:`CloudStore._error`).
"""

from __future__ import annotations

import abc
import bisect
import io
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar, TypeVar

from broker.errors import StorageError
from broker.storage.base import Data, ObjectStore, check_object_path, prefixed, sdk_call

T = TypeVar("T")


class PartsReader(io.RawIOBase):
    """The bytes of ``parts`` in order as a read-only, seekable binary file, never
    joined: an SDK given it as a request body reads (and hashes, and sends) it a
    block at a time, so a write of an object encoded in parts costs no copy of the
    whole object (a joined copy of a 400 MB queue object is 400 MB more at the
    peak of every commit). ``len()`` is the size in bytes, so the SDK sends a
    ``Content-Length`` rather than a chunked body. The parts must not change while
    it is read; seeking back (an SDK rewinds to hash and to resend) is cheap.
    """

    def __init__(self, parts: Data) -> None:
        super().__init__()
        self._parts: Sequence[bytes] = [parts] if isinstance(parts, bytes) else parts
        #: ``_starts[i]``: the offset of part i; the last entry is the size.
        self._starts = list(itertools.accumulate(map(len, self._parts), initial=0))
        self._pos = 0

    def __len__(self) -> int:
        return self._starts[-1]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self)}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (all that is left if ``size`` is None or negative)."""
        end = len(self) if size is None or size < 0 else min(len(self), self._pos + size)
        if end <= self._pos:
            return b""
        i = bisect.bisect_right(self._starts, self._pos) - 1
        out: list[bytes] = []
        pos = self._pos
        while pos < end:
            start = self._starts[i]
            part = self._parts[i]
            stop = min(len(part), end - start)
            if pos - start < stop:
                out.append(part if pos == start and stop == len(part) else part[pos - start:stop])
                pos = start + stop
            i += 1
        self._pos = end
        return out[0] if len(out) == 1 else b"".join(out)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(memoryview(buffer).cast("B")))
        memoryview(buffer).cast("B")[:len(data)] = data
        return len(data)


class CloudStore(ObjectStore):
    """Objects under ``{scheme}://{bucket}/{prefix}`` of one cloud, through its SDK.

    ``endpoint``: the endpoint as the URL may show it (host, no user info; None
    for the cloud's own); ``retries``: attempts per call (at least 1) for
    transient failures; ``timeout_s`` (seconds) bounds connecting and each read
    of an answer (the store hands it to its client).
    """

    #: The exceptions of the store's SDK (and transport) that its calls map to ours.
    failures: ClassVar[tuple[type[Exception], ...]] = ()

    def __init__(self, scheme: str, bucket: str, prefix: str, *, endpoint: str | None,
                 retries: int, timeout_s: float) -> None:
        self.prefix = check_object_path(prefix.strip("/"))
        #: ``{scheme}://{bucket}``, as error messages name the bucket or container.
        self.where = f"{scheme}://{bucket}"
        self.url = f"{self.where}/{self.prefix}".rstrip("/") + (
            f" at {endpoint}" if endpoint else "")
        self.retries = max(1, retries)
        self.timeout_s = timeout_s

    @abc.abstractmethod
    def _error(self, exc: Exception, key: str) -> StorageError:
        """The contract's error for ``exc`` (one of :attr:`failures`), raised by a
        call about ``key``; its message shows no credential and no request URL."""

    def _key(self, key: str) -> str:
        return prefixed(self.prefix, key)

    def _call(self, key: str, fn: Callable[[], T]) -> T:
        """``fn()`` (one SDK call about ``key``), its errors mapped and the
        transient ones retried (:func:`~broker.storage.base.sdk_call`)."""
        return sdk_call(fn, self.failures, lambda exc: self._error(exc, key), self.retries)

    def _names(self, full_names: Iterable[str]) -> list[str]:
        """Listed object names without the store's prefix, sorted."""
        strip = len(self._key(""))
        return sorted(name[strip:] for name in full_names)

    def get(self, key: str) -> bytes:
        return self.read(key).data
