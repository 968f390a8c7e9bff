"""Request keys and the calls they name, for :mod:`broker.model.receipts`.

A client's request keys are ``r-{client}-{n}``, ``n`` counting up, and
``r-{client}-{n}.{i}`` for part ``i`` of call ``n`` (a call sent in several
requests: each batch of a push of several has its own key and receipt). For
the client's floor the parts are one call: :class:`CallIndex` knows which
receipts belong to which call, so a floor past ``n`` drops them all at once.

The parts of one call also age together (:class:`CallAges`): a push of many
batches may run longer than ``retry_ttl_s``, and a repeat of the whole call
after its last batch's answer was lost must find the first batch's receipt
too. Only keys of the client's form are grouped so: a key of another form may
itself end in ``.{digits}``, so its parts cannot be told from other keys; each
of its receipts ages on its own.
"""

from __future__ import annotations


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 18


def client_of(key: str) -> tuple[str, int] | None:
    """(client, number) of a request key ``r-{client}-{n}`` or ``r-{client}-{n}.{i}``,
    or None for a key of another form (such keys are kept until their age or count
    runs out)."""
    client, dash, tail = key.rpartition("-")
    n, dot, part = tail.partition(".")
    if not dash or not client.startswith("r-") or not _number(n) or (dot and not _number(part)):
        return None
    return client, int(n)


class CallIndex:
    """The keys of the receipts kept, by client and call number."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[str, dict[int, list[str]]] = {}  # client -> n -> its parts' keys

    def add(self, key: str) -> None:
        """Index ``key`` (a key of another form is not indexed)."""
        who = client_of(key)
        if who is not None:
            keys = self._calls.setdefault(who[0], {}).setdefault(who[1], [])
            if key not in keys:
                keys.append(key)

    def remove(self, key: str) -> None:
        who = client_of(key)
        mine = self._calls.get(who[0]) if who is not None else None
        if who is None or mine is None:
            return
        keys = mine.get(who[1], [])
        if key in keys:
            keys.remove(key)
        if not keys:
            mine.pop(who[1], None)
        if not mine:
            del self._calls[who[0]]

    def pop_below(self, client: str, floor: int) -> list[str]:
        """Forget and return the keys of ``client``'s calls numbered below ``floor``."""
        mine = self._calls.get(client)
        if not mine:
            return []
        done = [key for n in [n for n in mine if n < floor] for key in mine.pop(n)]
        if not mine:
            del self._calls[client]
        return done


def call_of(key: str) -> str:
    """The call a request key belongs to: ``r-{client}-{n}`` for ``r-{client}-{n}``
    and its parts, else ``key`` itself."""
    who = client_of(key)
    return key if who is None else f"{who[0]}-{who[1]}"


class CallAges:
    """The time of the youngest receipt kept of each call (its parts together)."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[str, list[int]] = {}  # call -> [receipts kept, youngest ms]

    def add(self, key: str, at_ms: int) -> None:
        """Count the receipt of ``key``, recorded at ``at_ms``."""
        entry = self._calls.setdefault(call_of(key), [0, at_ms])
        entry[0] += 1
        entry[1] = max(entry[1], at_ms)

    def remove(self, key: str) -> None:
        """Uncount the receipt of ``key`` (the youngest time stays while any is kept)."""
        call = call_of(key)
        entry = self._calls.get(call)
        if entry is not None:
            entry[0] -= 1
            if entry[0] <= 0:
                del self._calls[call]

    def youngest(self, key: str) -> int | None:
        """When the youngest receipt of ``key``'s call was recorded (ms), or None."""
        entry = self._calls.get(call_of(key))
        return None if entry is None else entry[1]

    def rebase(self, now_ms: int) -> None:
        """Every call's youngest receipt re-timed to ``now_ms``."""
        for entry in self._calls.values():
            entry[1] = now_ms
