"""Lease tokens as clients see them: the stored token with a tag that binds it
to its queue.

A job's lease is stored as ``<job id>.<fence>`` (:mod:`broker.model.job`):
predictable, and the same in every queue. What crosses the broker's edge (a
claim's answer, a heartbeat, complete or fail, a job listing asked for
tokens) is ``<job id>.<fence>-<tag>``: the tag is 16 hex digits (64 bits) of
BLAKE2b keyed with the queue's secret over the queue's name, a NUL and the
stored token. A token of another queue, a guessed one or one with its tag
altered fails the tag and is answered :data:`NOT_VALID` without its job being
looked up, so it changes nothing.

The secret (``token_key``: :data:`KEY_BYTES` random bytes, hex) is kept in
the queue object, so a token stays good across a restart and a takeover. It
is made when the queue is made; an object written before tokens were tagged
gets one when it is loaded (:func:`bind`) and keeps it from its next write.
The workers of such an object hold untagged tokens, granted before the key:
:func:`bind` records the lease counter then (``untagged_fences``, N, written
in the object), and :func:`checker` takes an untagged ``<job id>.<fence>``
with fence <= N as its own stored token, so those leases keep working until
they end (then :func:`untagged_done` tells the reclaim to set N back to 0).
No token the broker hands out is untagged.
The randomness comes from the caller: this module is pure. The secret never
leaves the object: no view, log, repr or error shows it.

Cost: one keyed hash of a short string per token, about half a microsecond
(a BLAKE2b state keyed once per load is copied per token).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable
from typing import Protocol

from broker.model.job import token_seq

#: Between the stored token and its tag (not ``.``, which ends the fence).
SEP = "-"
#: Bytes of a queue's secret, and hex digits of a tag (64 bits).
KEY_BYTES = 32
TAG_CHARS = 16
#: What a token whose tag does not verify is answered.
NOT_VALID = "token is not valid for this queue"


class Unbound(AssertionError):
    """A state was asked to hand out or check tokens without a key (a bug:
    whoever loads or makes a state :func:`bind` s it)."""


class Tagger:
    """Tags and checks the tokens of one queue: its secret and name, hashed once."""

    __slots__ = ("_key", "_keyed", "_queue")

    def __init__(self, key: bytes, queue: str) -> None:
        self._key, self._queue = key, queue
        self._keyed = hashlib.blake2b(queue.encode() + b"\0", key=key, digest_size=TAG_CHARS // 2)

    def __reduce__(self) -> tuple[type[Tagger], tuple[bytes, str]]:
        return Tagger, (self._key, self._queue)  # (a hash state does not pickle or copy)

    def tag(self, token: str) -> str:
        """``token`` (a stored one) as a client gets it."""
        h = self._keyed.copy()
        h.update(token.encode())
        return token + SEP + h.hexdigest()

    def stored(self, wire: str) -> str | None:
        """The stored token a client's ``wire`` token stands for, or None if its
        tag does not verify (compared in constant time)."""
        token, sep, tag = wire.rpartition(SEP)
        if not sep or len(tag) != TAG_CHARS or not tag.isascii():
            return None
        h = self._keyed.copy()
        h.update(token.encode("utf-8", "surrogatepass"))  # (any str a caller passes)
        return token if hmac.compare_digest(h.hexdigest(), tag) else None

    def __repr__(self) -> str:
        return "Tagger(...)"  # never the key


class _Fenced(Protocol):
    @property
    def fence(self) -> int: ...


class Keyed(Protocol):
    """What :func:`bind`, :func:`tagger` and :func:`checker` use of a queue state."""

    token_key: str
    tagger: Tagger | None
    untagged_fences: int  # leases up to this number may show untagged tokens (0: none)

    @property
    def counters(self) -> _Fenced: ...


def new_key(random_bytes: Callable[[int], bytes]) -> str:
    """A fresh secret for a queue, from ``random_bytes(n)`` (``secrets.token_bytes``)."""
    key = random_bytes(KEY_BYTES)
    if len(key) != KEY_BYTES:
        raise ValueError(f"a token key needs {KEY_BYTES} random bytes")
    return key.hex()


def check_key(raw: object) -> str:
    """A stored ``token_key``, checked; ``ValueError`` (never quoting it) if it is not
    :data:`KEY_BYTES` bytes of lowercase hex."""
    if not isinstance(raw, str) or len(raw) != 2 * KEY_BYTES or not raw.isascii() \
            or raw.strip("0123456789abcdef"):
        raise ValueError(f"token_key must be {2 * KEY_BYTES} lowercase hex digits")
    return raw


def bind(state: Keyed, queue: str,
         random_bytes: Callable[[int], bytes] | None) -> None:
    """Make ``state`` (queue ``queue``) ready to tag and check tokens. A state
    without a key (a new queue, or an object from before tokens were tagged)
    gets one from ``random_bytes``, written with its next write, and the
    leases granted so far (``counters.fence``) are let through untagged
    (``untagged_fences``, see :func:`checker`); with ``random_bytes`` None it
    stays without (a read that must not invent one: it then shows no tokens)."""
    if not state.token_key:
        if random_bytes is None:
            state.tagger = None
            return
        state.token_key = new_key(random_bytes)
        state.untagged_fences = state.counters.fence
    state.tagger = Tagger(bytes.fromhex(state.token_key), queue)


def tagger(state: Keyed) -> Tagger:
    """The state's :class:`Tagger`; raises :class:`Unbound` if it has none."""
    found = state.tagger
    if found is None:
        raise Unbound("this queue state has no token key bound (broker.model.tokens.bind)")
    return found


def checker(state: Keyed) -> Callable[[str], str | None]:
    """What the stored token of a client's token is, for ``state``'s operations:
    :meth:`Tagger.stored`, and while ``state.untagged_fences`` (N) is set, also
    an untagged ``<job id>.<fence>`` with 1 <= fence <= N (a lease granted before
    the queue had a key) as itself. Tagged tokens cost what they did; an
    untagged one with a larger fence, or not spelled as a stored token, is None.
    Raises :class:`Unbound` if the state has no key bound."""
    stored = tagger(state).stored
    top = state.untagged_fences
    if not top:
        return stored

    def check(wire: str) -> str | None:
        token = stored(wire)
        if token is None and SEP not in wire:
            fence = untagged_fence(wire)
            if fence is not None and fence <= top:
                return wire
        return token

    return check


def untagged_fence(token: str) -> int | None:
    """The fence of ``token`` if it is spelled as a stored token
    (``<job id>.<fence>``, fence >= 1 without a leading zero), else None."""
    fence = token.rpartition(".")[2]
    if not fence.isascii() or not fence.isdigit() or fence[0] == "0" or len(fence) > 18 \
            or token_seq(token) is None:
        return None
    return int(fence)


def untagged_done(state: Keyed, held_fences: Iterable[int]) -> bool:
    """Whether no lease may still show an untagged token, given the fences of
    the leases still held (``held_fences``, read only while N > 0): if so, N
    is set back to 0 and True is answered (the object changed)."""
    top = state.untagged_fences
    if not top or any(fence <= top for fence in held_fences):
        return False
    state.untagged_fences = 0
    return True


def stored_part(wire: str) -> str:
    """The stored token within a client's token, unchecked (for tools that match a
    client's token to a job's stored lease, such as the chaos checker)."""
    token, sep, _ = wire.rpartition(SEP)
    return token if sep else wire
