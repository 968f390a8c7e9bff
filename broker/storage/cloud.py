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
from collections.abc import Callable, Iterable
from typing import ClassVar, TypeVar

from broker.errors import StorageError
from broker.storage.base import ObjectStore, check_object_path, prefixed, sdk_call

T = TypeVar("T")


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
