"""Which connections a broker keeps when there are too many: the rule
:mod:`broker.http.connections` applies to every new connection. Pure: no I/O,
the time passed in.

Every open connection is in one of three states:

* **unheard**: it has not sent a whole request's headers yet (it connected and
  said nothing, or is slow about its first request);
* **idle**: it has been answered and has no request in flight (a kept-alive
  connection waiting in some client's pool);
* **busy**: a request is being served on it, a long-poll claim included.

An unheard connection is *silent* once it has been unheard for
:data:`SILENT_S`; until then it is taken for a client about to speak (a burst
of new connections is accepted before any of them is read). A new connection
from address A is admitted, making room if it must:

1. A holds ``max_per_address`` connections already (a trusted proxy's are not
   capped): A's own oldest silent connection is shed, else A's longest idle
   one, else A's oldest unheard one; if A has none of these, the new
   connection is refused.
2. The broker holds ``max_total``: the oldest unheard connection of the address
   with the most unheard connections (ties: the one connected first) is shed
   if it is silent; else the longest idle connection of the address with the
   most idle ones; else that unheard one after all; if every connection is
   busy, the new one is refused.

A busy connection is never shed, so a request in progress (a long poll too)
always gets its answer. Shedding costs a well-behaved client little: a
client that connects sends its request at once, so its connection is unheard
for a moment only, and a pooled idle connection that is closed is replaced
(as when the keep-alive timeout closes it). So idle or slow connections from
one address, however many, cannot keep another address out.

And once the broker is past ``BUSY_FRACTION`` of ``max_total`` (or A past that
fraction of its share), the new connection is told to hurry: it must send its
first byte within ``BUSY_FIRST_BYTE_S`` (see :class:`Verdict`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, NamedTuple, TypeVar

from broker.limits import BUSY_FRACTION

#: An unheard connection is silent after this long (s), and shed before idle ones.
SILENT_S = 1.0

K = TypeVar("K", bound=Hashable)


class Verdict(NamedTuple, Generic[K]):
    """What to do with a new connection.

    ``admitted``: keep it (else answer 503 and close it); ``shed``: the
    connections to close first, to make room (each already forgotten by the
    book); ``hurry``: give it the short first-byte deadline; ``full``: why it
    was refused, ``"address"`` (its address holds its share) or ``"total"``.
    """

    admitted: bool
    shed: tuple[K, ...]
    hurry: bool
    full: str


class Book(Generic[K]):
    """The open connections by address and state, and the rule of the module.

    ``max_total``: most connections open at once; ``max_per_address``: most from
    one address (counted by :func:`broker.http.peers.address_key`). Times in
    seconds on any one clock.
    """

    def __init__(self, max_total: int, max_per_address: int) -> None:
        if max_total < 1 or max_per_address < 1:
            raise ValueError("max_total and max_per_address must be at least 1")
        self.max_total = max_total
        self.max_per_address = max_per_address
        self._busy_total = BUSY_FRACTION * max_total
        self._busy_address = BUSY_FRACTION * max_per_address
        self._address: dict[K, str] = {}  # every open connection -> its address
        self._count: dict[str, int] = {}  # address -> its open connections
        # address -> its unheard (idle) connections -> since when, oldest first
        self._unheard: dict[str, dict[K, float]] = {}
        self._idle: dict[str, dict[K, float]] = {}

    def __len__(self) -> int:
        return len(self._address)

    def count(self, address: str) -> int:
        """Connections open from ``address``."""
        return self._count.get(address, 0)

    def unheard(self, address: str) -> int:
        return len(self._unheard.get(address, ()))

    def idle(self, address: str) -> int:
        return len(self._idle.get(address, ()))

    def state(self, conn: K) -> str | None:
        """``unheard``, ``idle``, ``busy``, or None for a connection not in the book."""
        address = self._address.get(conn)
        if address is None:
            return None
        if conn in self._unheard.get(address, ()):
            return "unheard"
        return "idle" if conn in self._idle.get(address, ()) else "busy"

    # -- the rule ------------------------------------------------------------------

    def admit(self, conn: K, address: str, now: float, *, capped: bool = True) -> Verdict[K]:
        """Admit ``conn`` from ``address`` (unheard, since ``now``) or refuse it, by the
        module's rule. ``capped``: the per-address share applies (False for a
        trusted proxy)."""
        shed: list[K] = []
        if capped and self._count.get(address, 0) >= self.max_per_address:
            victim = _pick(self._unheard.get(address), self._idle.get(address), now)
            if victim is None:
                return Verdict(False, (), False, "address")
            self.gone(victim)
            shed.append(victim)
        if len(self._address) >= self.max_total:
            victim = _pick(_busiest(self._unheard), _busiest(self._idle), now)
            if victim is None:
                return Verdict(False, tuple(shed), False, "total")
            self.gone(victim)
            shed.append(victim)
        self._address[conn] = address
        count = self._count[address] = self._count.get(address, 0) + 1
        self._unheard.setdefault(address, {})[conn] = now
        hurry = len(self._address) >= self._busy_total or (
            capped and count >= self._busy_address)
        return Verdict(True, tuple(shed), hurry, "")

    # -- what the connections do ---------------------------------------------------

    # heard and answered run on every request: the usual case (a kept-alive
    # connection, idle -> busy -> idle) is done inline, without _remove or a new
    # dict each time (bench/broker_bench.py, push-b1 rows)
    def heard(self, conn: K) -> None:
        """A request's headers arrived on ``conn``: it is busy until :meth:`answered`."""
        address = self._address.get(conn)
        if address is None:
            return
        idle = self._idle.get(address)
        if idle is not None and idle.pop(conn, None) is not None:
            if not idle:
                del self._idle[address]
            return
        _remove(self._unheard, address, conn)

    def answered(self, conn: K, now: float) -> None:
        """``conn`` has no request in flight any more: idle, since ``now``."""
        address = self._address.get(conn)
        if address is None:
            return
        unheard = self._unheard.get(address)
        if unheard is not None and conn in unheard:
            return
        idle = self._idle.get(address)
        if idle is None:
            self._idle[address] = {conn: now}
        else:
            idle[conn] = now

    def gone(self, conn: K) -> None:
        """``conn`` is closed (or being closed): forget it. Idempotent."""
        address = self._address.pop(conn, None)
        if address is None:
            return
        left = self._count[address] - 1
        if left:
            self._count[address] = left
        else:
            del self._count[address]
        if not _remove(self._unheard, address, conn):
            _remove(self._idle, address, conn)


def _remove(states: dict[str, dict[K, float]], address: str, conn: K) -> bool:
    held = states.get(address)
    if held is None or held.pop(conn, None) is None:
        return False
    if not held:
        del states[address]
    return True


def _pick(unheard: dict[K, float] | None, idle: dict[K, float] | None,
          now: float) -> K | None:
    """The connection to shed of these: the oldest ``unheard`` one if it is silent,
    else the longest ``idle`` one, else the oldest unheard one; None if none."""
    if unheard:
        oldest, since = next(iter(unheard.items()))
        if now - since >= SILENT_S or not idle:
            return oldest
    return next(iter(idle)) if idle else None


def _busiest(states: dict[str, dict[K, float]]) -> dict[K, float] | None:
    """The connections of the address holding the most of ``states``' (ties: the
    address whose oldest is oldest); None if there are none."""
    best: dict[K, float] | None = None
    for held in states.values():
        if best is None or len(held) > len(best) or (
                len(held) == len(best) and next(iter(held.values())) < next(iter(best.values()))):
            best = held
    return best
