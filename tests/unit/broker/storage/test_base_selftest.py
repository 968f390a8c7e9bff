"""The stores' start-up self-test (ObjectStore.self_test) against stores with
injected faults: an unsafe store is refused, and a store that loses responses
or fails before landing is not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from broker.errors import Conflict, StorageUnavailable, UnsafeStore
from broker.storage import Data, FileStore, MemoryStore, ObjectStore, Versioned, as_bytes


class _IgnoresConditions(MemoryStore):
    """An injected fault: a store that silently ignores If-Match."""

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        self.put(key, as_bytes(data))
        return self.read(key).etag


class _IgnoresIfNoneMatch(MemoryStore):
    """An injected fault: a store whose create overwrites an existing object."""

    def create_if_absent(self, key: str, data: Data) -> str:
        self.put(key, as_bytes(data))
        return self.read(key).etag


def test_self_test_refuses_a_store_that_ignores_conditions() -> None:
    """The self-test refuses a store that ignores If-Match, and one whose create
    overwrites an existing object."""
    with pytest.raises(UnsafeStore, match="does not honour"):
        _IgnoresConditions().self_test()
    with pytest.raises(UnsafeStore, match="does not honour"):
        _IgnoresIfNoneMatch().self_test()


class _Faulty(ObjectStore):
    """Wraps a store; chosen calls of ``op`` ("create" or "write") misbehave.

    ``land`` says whether the call reaches the inner store before ``error``
    is raised: landing and then raising is a write whose response was lost
    (``StorageUnavailable``) or whose client-side retry found its own write
    (``Conflict``, what S3 answers the retry with).
    """

    def __init__(self, inner: ObjectStore, op: str, error: type[Exception], *,
                 land: bool, times: int = 1) -> None:
        self.inner, self.op, self.error, self.land = inner, op, error, land
        self.url = inner.url
        self.left = times
        self.fired = 0

    def _maybe_fail(self, op: str, write: Callable[[], str]) -> str:
        if op != self.op or self.left == 0:
            return write()
        self.left -= 1
        self.fired += 1
        if self.land:
            write()
        raise self.error(f"injected {self.error.__name__} after {op}")

    def create_if_absent(self, key: str, data: Data) -> str:
        return self._maybe_fail("create", lambda: self.inner.create_if_absent(key, data))

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        return self._maybe_fail("write", lambda: self.inner.write_if_match(key, data, etag))

    def read(self, key: str) -> Versioned:
        return self.inner.read(key)

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def _inner_store(kind: str, tmp_path: Path) -> ObjectStore:
    return MemoryStore() if kind == "memory" else FileStore(tmp_path / "store")


@pytest.mark.parametrize("kind", ["memory", "file"])
@pytest.mark.parametrize("op", ["create", "write"])
@pytest.mark.parametrize("error", [StorageUnavailable, Conflict])
def test_self_test_survives_a_write_whose_response_was_lost(
    kind: str, op: str, error: type[Exception], tmp_path: Path
) -> None:
    """A self-test write (a create or a conditional write, on a memory or a file
    store) that landed but answered StorageUnavailable or Conflict (a lost
    response; a client's retry that found its own write) does not fail the
    self-test, which leaves nothing behind."""
    inner = _inner_store(kind, tmp_path)
    flaky = _Faulty(inner, op, error, land=True)
    flaky.self_test()
    assert flaky.fired == 1
    assert inner.list("_osqueue/") == []


@pytest.mark.parametrize("op", ["create", "write"])
def test_self_test_repeats_a_write_that_failed_before_landing(op: str) -> None:
    """A self-test write that failed twice before landing is repeated until it
    lands; nothing is left behind."""
    inner = MemoryStore()
    flaky = _Faulty(inner, op, StorageUnavailable, land=False, times=2)
    flaky.self_test()
    assert flaky.fired == 2
    assert inner.list("_osqueue/") == []


def test_self_test_gives_up_on_a_store_that_keeps_failing() -> None:
    """A store whose creates keep failing fails the self-test with the store's own
    error after three tries; nothing is left behind."""
    inner = MemoryStore()
    hopeless = _Faulty(inner, "create", StorageUnavailable, land=False, times=100)
    with pytest.raises(StorageUnavailable, match="injected"):
        hopeless.self_test()
    assert hopeless.fired == 3
    assert inner.list("_osqueue/") == []


def test_self_test_still_refuses_unsafe_stores_that_lose_responses() -> None:
    """Lost responses do not hide an unsafe store: one that ignores conditions is
    refused whether its writes report a lost response once or every time."""
    lossy_and_unsafe = _Faulty(_IgnoresConditions(), "create", StorageUnavailable, land=True)
    with pytest.raises(UnsafeStore, match="does not honour"):
        lossy_and_unsafe.self_test()
    # A stale write that lands and then reports a lost response is still caught.
    stale_lands = _Faulty(_IgnoresConditions(), "write", StorageUnavailable, land=True,
                          times=100)
    with pytest.raises(UnsafeStore):
        stale_lands.self_test()


def test_self_test_refuses_a_store_that_refuses_a_good_write() -> None:
    """A store that refuses a conditional write that must succeed (Conflict on the
    current etag) is refused as unsafe."""
    refuses = _Faulty(MemoryStore(), "write", Conflict, land=False)
    with pytest.raises(UnsafeStore, match="must succeed"):
        refuses.self_test()
