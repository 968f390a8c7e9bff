"""Request keys and the calls they name, for :mod:`broker.model.receipts`.

A client's request keys are ``r-{client}-{n}``, ``n`` counting up, and
``r-{client}-{n}.{i}`` for part ``i`` of call ``n`` (a call sent in several
requests: each batch of a push of several has its own key and receipt). For
the client's floor the parts are one call: :class:`CallIndex` knows which
receipts belong to which call, so a floor past ``n`` drops them all at once.

The parts of one call also age together (:meth:`CallIndex.youngest`): a push
of many batches may run longer than ``retry_ttl_s``, and a repeat of the
whole call after its last batch's answer was lost must find the first
batch's receipt too. Only keys of the client's form are grouped so: a key of
another form may itself end in ``.{digits}``, so its parts cannot be told
from other keys; each of its receipts ages on its own.

Every keyed call passes here several times (its floor, its receipt), so each
operation parses its key once and keeps the parts and the youngest time of a
call in one entry (``bench/receipts_bench.py`` measures it).
"""

from __future__ import annotations

import functools


# Cached: a keyed call's key is read here three times in one operation (its
# floor, the floor check, its receipt), and once more when its receipt is
# dropped; a hit costs no Python frame (bench/broker_bench.py, push-b1 rows).
@functools.lru_cache(maxsize=1024)
def client_of(key: str) -> tuple[str, int] | None:
    """(client, number) of a request key ``r-{client}-{n}`` or ``r-{client}-{n}.{i}``,
    or None for a key of another form (such keys are kept until their age or count
    runs out)."""
    client, dash, tail = key.rpartition("-")
    n, dot, part = tail.partition(".")
    if not dash or not client.startswith("r-") or not n.isascii() or not n.isdigit() \
            or len(n) > 18 or (dot and (not part.isascii() or not part.isdigit()
                                        or len(part) > 18)):
        return None
    return client, int(n)


class _Call:
    """One call's receipts kept: its parts' keys, and when the youngest was recorded (ms)."""

    __slots__ = ("keys", "youngest")

    def __init__(self, key: str, at_ms: int) -> None:
        self.keys = [key]
        self.youngest = at_ms


class CallIndex:
    """The keys of the receipts kept, by client and call number, and when each
    call's youngest receipt was recorded (keys of another form are not indexed)."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[str, dict[int, _Call]] = {}  # client -> n -> the call

    def add(self, key: str, at_ms: int) -> None:
        """Index ``key``, whose receipt was recorded at ``at_ms``."""
        who = client_of(key)
        if who is None:
            return
        mine = self._calls.get(who[0])
        if mine is None:
            self._calls[who[0]] = {who[1]: _Call(key, at_ms)}
            return
        call = mine.get(who[1])
        if call is None:
            mine[who[1]] = _Call(key, at_ms)
            return
        if key not in call.keys:
            call.keys.append(key)
        if at_ms > call.youngest:
            call.youngest = at_ms

    def remove(self, key: str) -> None:
        """Unindex ``key`` (its call's youngest time stays while any part is kept)."""
        who = client_of(key)
        mine = self._calls.get(who[0]) if who is not None else None
        if who is None or mine is None:
            return
        call = mine.get(who[1])
        if call is None:
            return
        if key in call.keys:
            call.keys.remove(key)
        if not call.keys:
            del mine[who[1]]
            if not mine:
                del self._calls[who[0]]

    def youngest(self, key: str) -> int | None:
        """When the youngest receipt of ``key``'s call was recorded (ms), or None
        (a key of another form, or not indexed)."""
        who = client_of(key)
        mine = self._calls.get(who[0]) if who is not None else None
        call = mine.get(who[1]) if who is not None and mine is not None else None
        return None if call is None else call.youngest

    def pop_below(self, client: str, floor: int) -> list[str]:
        """Forget and return the keys of ``client``'s calls numbered below ``floor``."""
        mine = self._calls.get(client)
        if not mine:
            return []
        done = [key for n in [n for n in mine if n < floor] for key in mine.pop(n).keys]
        if not mine:
            del self._calls[client]
        return done

    def rebase(self, now_ms: int) -> None:
        """Every call's youngest receipt re-timed to ``now_ms``."""
        for mine in self._calls.values():
            for call in mine.values():
                call.youngest = now_ms
