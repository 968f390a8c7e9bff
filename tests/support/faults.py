"""A fault-injecting store wrapper and an injectable clock, for failure-path tests.

``FaultyStore(inner)`` passes every call to a real store, except the calls a
test scripts with :meth:`FaultyStore.inject`. A fault applies to the n-th
later call of one method (or to every call, with ``times=None``):

* ``LOST_REPLY``: the call lands, the caller sees ``StorageUnavailable``
  (a timeout or a dropped connection after the store applied it);
* ``LOST_REPLY_412``: the call lands, the caller sees ``Conflict`` (what a
  client's own retry of a landed conditional write gets);
* ``NOT_LANDED``: the caller sees ``StorageUnavailable`` and nothing happened;
* ``LATE``: the caller sees ``StorageUnavailable`` now; the write lands later,
  when the test calls :meth:`FaultyStore.land_late` (a delayed PUT);
* ``ENOSPC`` / ``EIO``: a raw ``OSError`` with that errno, nothing written;
* ``REFUSED``: ``StorageRefused`` (an S3 403), nothing written.

``before`` / ``after`` hooks (given the key) run arbitrary code around the
real call: a foreign write between an attempt and its re-read, for instance.
Faults of one method are tried in the order they were injected; a call is
taken by the first fault that still wants one.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.errors import Conflict, StorageRefused, StorageUnavailable
from broker.storage import Data, ObjectStore, Versioned

LOST_REPLY = "lost_reply"
LOST_REPLY_412 = "lost_reply_412"
NOT_LANDED = "not_landed"
LATE = "late"
ENOSPC = "enospc"
EIO = "eio"
REFUSED = "refused"


@dataclass
class _Fault:
    kind: str | None
    nth: int  # 1 = the next call
    times: int | None
    key_contains: str
    before: Callable[[str], None] | None = None
    after: Callable[[str], None] | None = None
    seen: int = 0
    fired: int = 0


@dataclass
class FaultyStore(ObjectStore):
    inner: ObjectStore
    calls: dict[str, int] = field(default_factory=dict)
    injected: list[tuple[str, str | None, str]] = field(default_factory=list)
    _faults: dict[str, list[_Fault]] = field(default_factory=dict)
    _late: list[Callable[[], Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.url = self.inner.url

    def inject(self, method: str, kind: str | None = None, *, nth: int = 1,
               times: int | None = 1, key_contains: str = "",
               before: Callable[[str], None] | None = None,
               after: Callable[[str], None] | None = None) -> None:
        """Fault the ``nth`` next call of ``method`` on a key containing
        ``key_contains`` (and the following ones, ``times`` in all; None: for
        ever). ``kind`` None runs only the hooks."""
        with self._lock:
            self._faults.setdefault(method, []).append(
                _Fault(kind, nth, times, key_contains, before, after))

    def heal(self) -> None:
        with self._lock:
            self._faults.clear()

    def land_late(self, _key: str = "") -> int:
        """Land every write held back by ``LATE``; return how many."""
        with self._lock:
            late, self._late = self._late, []
        for write in late:
            try:
                write()
            except Conflict:
                pass  # a late conditional write can lose, as a real one would
        return len(late)

    def _fault(self, method: str, key: str) -> _Fault | None:
        with self._lock:
            self.calls[method] = self.calls.get(method, 0) + 1
            for f in self._faults.get(method, []):
                if f.key_contains not in key:
                    continue
                f.seen += 1
                if f.seen < f.nth or (f.times is not None and f.fired >= f.times):
                    continue
                f.fired += 1
                self.injected.append((method, f.kind, key))
                return f
        return None

    def _call(self, method: str, key: str, real: Callable[[], Any]) -> Any:
        f = self._fault(method, key)
        if f is None:
            return real()
        if f.before is not None:
            f.before(key)
        kind = f.kind
        if kind == NOT_LANDED:
            raise StorageUnavailable(f"injected: {method} {key} timed out before it landed")
        if kind == LATE:
            with self._lock:
                self._late.append(real)
            raise StorageUnavailable(f"injected: {method} {key} timed out (it lands later)")
        if kind in (ENOSPC, EIO):
            code = errno.ENOSPC if kind == ENOSPC else errno.EIO
            raise OSError(code, f"injected {errno.errorcode[code]}")
        if kind == REFUSED:
            raise StorageRefused(f"injected: S3 refused {key}: AccessDenied (403)")
        out = real()
        if f.after is not None:
            f.after(key)
        if kind == LOST_REPLY:
            raise StorageUnavailable(f"injected: {method} {key} landed, its reply was lost")
        if kind == LOST_REPLY_412:
            raise Conflict(f"injected: {method} {key} landed; the retry got 412")
        return out

    # -- the store interface, each call through _call --------------------------
    def read(self, key: str) -> Versioned:
        return self._call("read", key, lambda: self.inner.read(key))  # type: ignore[no-any-return]

    def head(self, key: str) -> str:
        return self._call("head", key, lambda: self.inner.head(key))  # type: ignore[no-any-return]

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        body = data if isinstance(data, bytes) else b"".join(data)
        return self._call(  # type: ignore[no-any-return]
            "write_if_match", key, lambda: self.inner.write_if_match(key, body, etag))

    def create_if_absent(self, key: str, data: Data) -> str:
        body = data if isinstance(data, bytes) else b"".join(data)
        return self._call(  # type: ignore[no-any-return]
            "create_if_absent", key, lambda: self.inner.create_if_absent(key, body))

    def put(self, key: str, data: bytes) -> str:
        return self._call("put", key, lambda: self.inner.put(key, data))  # type: ignore[no-any-return]

    def get(self, key: str) -> bytes:
        return self._call("get", key, lambda: self.inner.get(key))  # type: ignore[no-any-return]

    def list(self, prefix: str) -> list[str]:
        return self._call("list", prefix, lambda: self.inner.list(prefix))  # type: ignore[no-any-return]

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.inner.delete(key))

    def settle(self) -> None:
        self.inner.settle()


def held_call(store: FaultyStore, method: str, key_contains: str,
              hold_s: float = 20.0) -> tuple[threading.Event, threading.Event, threading.Event]:
    """Hold the next call of ``method`` on a key containing ``key_contains`` in
    its thread (a write in flight, say): ``(entered, release, landed)``, set
    when the call is held, to let it go on (within ``hold_s`` seconds, else it
    fails), and once it has succeeded."""
    entered, release, landed = threading.Event(), threading.Event(), threading.Event()

    def hold(_key: str) -> None:
        entered.set()
        assert release.wait(hold_s)

    store.inject(method, None, key_contains=key_contains, before=hold,
                 after=lambda _k: landed.set())
    return entered, release, landed


class Clock:
    """An injectable broker clock: wall time in ms and a monotonic time in s,
    moved only by the test."""

    def __init__(self, start_ms: int | None = None) -> None:
        self.ms = time.time_ns() // 1_000_000 if start_ms is None else start_ms
        self.mono = 1_000.0

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.ms += round(seconds * 1000)
        self.mono += seconds
