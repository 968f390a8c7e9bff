"""The one small storage interface every backend implements.

**Promises every store keeps** (tested for each by ``StoreContract`` in
``tests/integration/broker/test_storage.py``):

* a conditional write (``write_if_match``, ``create_if_absent``) either lands
  whole or is refused with ``Conflict`` and changes nothing; of writers racing
  on one version, exactly one wins (across threads);
* ``read`` returns one whole version with the etag naming it; ``head`` returns
  the same etag without the bytes; a write that changes the bytes changes the
  etag; ``put`` returns the etag ``head`` then gives;
* a stale etag, a missing object (``write_if_match``) and an existing one
  (``create_if_absent``) are refused; ``list`` is sorted and sees every
  object written before it (CAS and plain alike); ``delete`` of a missing
  object is no error;
* ``self_test`` passes and leaves nothing behind.

**Capabilities** (class flags, as huey's storage classes declare theirs):
promises only some stores keep. The contract test asserts each promise where
the flag claims it and asserts the flag is truthful where it does not; code
that needs one reads the flag or does not rely on it.

* :attr:`ObjectStore.etags_differ_on_same_bytes`: a CAS write's etag differs
  from every earlier etag of the object even when the bytes repeat (memory:
  a counter; files: a random version name). S3 does not keep it: its etag is
  the MD5 of the bytes, so writing A, B, A again gives the first etag back and
  a writer holding that etag would pass the CAS (A-B-A). Nothing relies on
  it: every version of a queue object carries a new ``seq`` (and commit id),
  so no two versions have the same bytes (see :mod:`broker.model.state`), which is
  also what lets the commit loop's verdict read "same etag" as "same version"
  (:mod:`broker.commit.verdict`) and a standby read "same etag" as "the owner did not
  write" (:mod:`broker.service.ownership`); a staged chunk whose etag still matches
  is the same bytes on any store (:mod:`broker.service.staging`).
* :attr:`ObjectStore.shared_across_processes`: every process that opens the
  store's URL sees the same objects (files, S3). A ``memory://`` store lives
  in one process: several brokers share it only as threads of that process.

Two kinds of object live in a store:

* **CAS objects** (the queue state): ``read`` gives ``(bytes, etag)`` and
  ``head`` gives just the etag (no body: cheap enough to poll every second);
  ``write_if_match`` and ``create_if_absent`` are the only ways to change
  them, and each either lands atomically or raises :class:`Conflict`.
* **Plain objects** (archive files, staging): ``put``/``get``/``list``/``delete``.

Keys are ``/``-separated paths relative to the store's root or prefix.
Every method is synchronous and thread-safe. Failure modes:

* ``InvalidRequest``: a key (or a ``list`` prefix) that could name something
  outside the store: a ``.`` or ``..`` part, a leading ``/``, an empty part
  (``a//b``; a prefix may end with ``/``), a backslash or a NUL. Checked here,
  once for every store (:func:`check_key`, :func:`check_prefix`), before the
  store's own method runs: a file store would resolve ``..``, an HTTP stack
  would remove dot segments, and the SDKs differ on the rest. Nothing is
  read, listed or written.

* ``NotFound``: the object is missing (``read``, ``head``, ``get``).
* ``Conflict``: a conditional write lost; nothing was written.
* ``StorageRefused``: the store refused the request for good (access denied,
  missing bucket or credentials, bad request); nothing was written and
  repeating the call will not help.
* ``StorageUnavailable``: a transient failure (timeout, 5xx after retries,
  a lock held too long by another process, a local disk error): the outcome
  is **unknown**; a write that raised it may or may not have landed, so the
  caller must re-read before deciding what happened.
"""

from __future__ import annotations

import abc
import functools
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from tenacity import retry_if_exception_type, stop_after_attempt

from broker.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    StorageError,
    StorageUnavailable,
    UnsafeStore,
    shown,
)
from broker.retry import retrying

T = TypeVar("T")

log = logging.getLogger("osqueue.storage")

#: What a write takes: bytes, or chunks of bytes written in order (saves
#: joining a large object only to write it).
Data = bytes | Sequence[bytes]

#: How often ``self_test`` repeats a probe step that failed with an unknown outcome.
_PROBE_ATTEMPTS = 3


def check_object_path(path: str, what: str = "store prefix") -> str:
    """Return ``path`` (a prefix or key of a cloud store) if no ``/``-separated segment
    of it is ``.`` or ``..``; else raise ``InvalidRequest``.

    Why: the Azure SDK sends blob names as URL paths and the HTTP stack removes dot
    segments, so ``az://c/..`` would read and write the blobs of *another* container
    (with a SAS or token credential) while ``list`` still looks in ``c`` and finds
    none of them (archive objects written, never listed).
    """
    if any(segment in (".", "..") for segment in path.split("/")):
        raise InvalidRequest(
            f"{what} {path!r} has a '.' or '..' segment; name the container or bucket "
            "and prefix directly (cloud object names are not file paths)")
    return path


def _bad_path(path: str, *, prefix: bool) -> bool:
    """Whether ``path`` could name something outside the store (see the module
    docstring); a ``prefix`` may be empty or end with ``/``."""
    if not path:
        return not prefix
    if path[0] == "/" or "//" in path or "\\" in path or "\0" in path:
        return True
    if path[-1] == "/" and not prefix:
        return True
    return "." in path and any(part in (".", "..") for part in path.split("/"))


def _refused(path: object, what: str) -> InvalidRequest:
    shown = repr(path[:60]) + ("..." if len(path) > 60 else "") if isinstance(path, str) \
        else type(path).__name__
    return InvalidRequest(
        f"invalid object {what} {shown}: use '/'-separated names, none of them empty, "
        "'.' or '..', with no leading '/', backslash or NUL")


def check_key(key: str) -> str:
    """Return ``key`` if it names an object inside the store, else raise ``InvalidRequest``."""
    if not isinstance(key, str) or _bad_path(key, prefix=False):
        raise _refused(key, "key")
    return key


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if the keys it starts lie inside the store, else raise
    ``InvalidRequest``. The empty prefix (every key) is one."""
    if not isinstance(prefix, str) or _bad_path(prefix, prefix=True):
        raise _refused(prefix, "prefix")
    return prefix


class ListedKeys:
    """Tells which listed keys store calls take: a key with a '.' or empty part
    (left by another tool, or an older broker on a cloud store) is refused by
    every call, so a sweep or clean-up walking a listing skips it, logging it once
    on ``logger`` as a ``what`` (``"staging object"``), instead of stopping at it."""

    def __init__(self, what: str, logger: logging.Logger) -> None:
        self._what, self._log = what, logger
        self._foreign: set[str] = set()  # listed keys no store call takes (logged once)

    def usable(self, key: str) -> bool:
        """Whether store calls take ``key``."""
        try:
            check_key(key)
        except InvalidRequest:
            if key not in self._foreign:
                self._foreign.add(key)
                self._log.warning("%s %s cannot be read or deleted by osqueue (a '.' or "
                                  "empty part); left in place", self._what, shown(key))
            return False
        return True


#: The methods whose first argument is a key, and the one that takes a prefix.
_KEY_METHODS = ("read", "head", "write_if_match", "create_if_absent", "put", "get", "delete")
_PREFIX_METHODS = ("list",)


def _checking(method: Callable[..., T], check: Callable[[str], str]) -> Callable[..., T]:
    """``method`` with its first argument checked by ``check`` first."""

    @functools.wraps(method)
    def checked(self: ObjectStore, path: str, *args: object, **kwargs: object) -> T:
        check(path)
        return method(self, path, *args, **kwargs)

    checked.__osqueue_checked__ = True  # type: ignore[attr-defined]
    return checked


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

    # Capabilities (see the module docstring). A backend that does not set one
    # makes no such promise.
    #: A CAS write's etag differs from every earlier etag of the object, even
    #: when the bytes repeat (False for content-hash etags: S3).
    etags_differ_on_same_bytes: ClassVar[bool] = False
    #: Every process that opens the same URL sees the same objects.
    shared_across_processes: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Every store's key and prefix methods check their argument first (see
        :func:`check_key`): one check for all backends, none to forget."""
        super().__init_subclass__(**kwargs)
        for names, check in ((_KEY_METHODS, check_key), (_PREFIX_METHODS, check_prefix)):
            for name in names:
                method = cls.__dict__.get(name)
                if callable(method) and not getattr(method, "__osqueue_checked__", False):
                    setattr(cls, name, _checking(method, check))

    @abc.abstractmethod
    def read(self, key: str) -> Versioned:
        """Return the object's bytes and etag; raise ``NotFound`` if absent."""

    def head(self, key: str) -> str:
        """Return the etag of the object's current version without its bytes.

        The etag is the one ``read`` returns for the same version. Raises
        ``NotFound`` if absent. This default reads the whole object; stores
        override it with a cheap metadata lookup.
        """
        return self.read(key).etag

    @abc.abstractmethod
    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        """Replace the object only if its etag is still ``etag``; return the new etag.

        Raises ``Conflict`` if the object changed or vanished since it was read.
        The new etag differs from ``etag`` if ``data`` differs from the bytes it
        replaces; if they are the same, only a store with
        :attr:`etags_differ_on_same_bytes` promises a new etag.
        """

    @abc.abstractmethod
    def create_if_absent(self, key: str, data: Data) -> str:
        """Create the object only if no object has that key; return its etag.

        Raises ``Conflict`` if it exists.
        """

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Write a plain object unconditionally (archive files, staging); return
        its etag, as :meth:`head` gives it for this version."""

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

        Writes and removes one probe object under ``_osqueue/selftest/``; every
        probe write carries a random nonce, so a write whose response was lost
        (``StorageUnavailable``, or ``Conflict`` from a client-side retry of a
        write that had landed) is recognised by reading the object back, and
        a failed step with an unknown outcome is repeated up to 3 times.

        Raises :class:`UnsafeStore` if a conditional write that must fail
        succeeds (running on such a store would silently lose jobs), or if one
        that must succeed is refused. Raises ``StorageUnavailable`` if the
        store keeps failing, and ``StorageRefused`` if it refuses access.
        """
        nonce = uuid.uuid4().hex
        key = f"_osqueue/selftest/{nonce}"
        p1, p2, p3, p4 = (f"osqueue self-test probe {n} {nonce}".encode() for n in range(1, 5))
        try:
            first = self._probe_must_land(key, p1, lambda: self.create_if_absent(key, p1))
            self._probe_must_land(key, p2, lambda: self.write_if_match(key, p2, first))
            self._probe_must_be_refused(key, p3, lambda: self.write_if_match(key, p3, first))
            self._probe_must_be_refused(key, p4, lambda: self.create_if_absent(key, p4))
            if self.read(key).data != p2:
                raise UnsafeStore(f"store {self.url} changed an object on a refused write")
        finally:
            self._probe_cleanup(key)

    def _landed(self, key: str, data: bytes) -> Versioned | None:
        """The object if it holds exactly ``data``, else None (absent or other bytes)."""
        try:
            current = self.read(key)
        except NotFound:
            return None
        return current if current.data == data else None

    def _probe_must_land(self, key: str, data: bytes, write: Callable[[], str]) -> str:
        """Run a probe write that must succeed; return the etag of ``data``."""
        for attempt in range(1, _PROBE_ATTEMPTS + 1):
            try:
                return write()
            except (Conflict, StorageUnavailable) as exc:
                # The response may have been lost after the write landed.
                try:
                    landed = self._landed(key, data)
                except StorageUnavailable:
                    if attempt == _PROBE_ATTEMPTS:
                        raise
                    continue
                if landed is not None:
                    return landed.etag
                if isinstance(exc, Conflict):
                    raise UnsafeStore(
                        f"store {self.url} refused a conditional write that must succeed "
                        f"({exc.message}); its conditional writes cannot be trusted"
                    ) from None
                if attempt == _PROBE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _probe_must_be_refused(self, key: str, data: bytes, write: Callable[[], str]) -> None:
        """Run a probe write that must raise ``Conflict``; raise ``UnsafeStore`` if it lands."""
        for attempt in range(1, _PROBE_ATTEMPTS + 1):
            try:
                write()
            except Conflict:
                return
            except StorageUnavailable:
                try:
                    landed = self._landed(key, data)
                except StorageUnavailable:
                    landed = None
                if landed is None:
                    if attempt == _PROBE_ATTEMPTS:
                        raise
                    continue
            raise UnsafeStore(
                f"store {self.url} accepted a conditional write that must be refused; "
                "it does not honour If-Match / If-None-Match, so osqueue will not run on it"
            )

    def _probe_cleanup(self, key: str) -> None:
        for attempt in range(1, _PROBE_ATTEMPTS + 1):
            try:
                self.delete(key)
                return
            except NotFound:
                return
            except StorageUnavailable as exc:
                if attempt == _PROBE_ATTEMPTS:
                    # A leftover probe is harmless; failing start-up for it is not.
                    log.warning("could not delete self-test probe %s in %s: %s",
                                key, self.url, exc.message)


def sdk_call(fn: Callable[[], T], failures: tuple[type[Exception], ...],
             classify: Callable[[Exception], StorageError], attempts: int) -> T:
    """Run one cloud SDK call: its ``failures`` become our errors by ``classify``,
    and ``StorageUnavailable`` is tried again, up to ``attempts`` tries in all
    (:func:`broker.retry.retrying`'s backoff). The S3, Azure and GCS stores' calls.

    Our error is raised outside the SDK error's handler, so no ``__context__``
    keeps the SDK's error alive: its message and request may quote a URL with a
    SAS token or a resumable upload's capability URL."""

    def attempt() -> T:
        try:
            return fn()
        except failures as exc:
            error = classify(exc)
        raise error

    policy = retrying(retry=retry_if_exception_type(StorageUnavailable),
                      stop=stop_after_attempt(attempts))
    return policy(attempt)


def prefixed(prefix: str, key: str) -> str:
    """``key`` under ``prefix`` (a cloud store's objects live below its prefix)."""
    return f"{prefix}/{key}" if prefix else key
