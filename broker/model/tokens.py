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
The randomness comes from the caller: this module is pure. The secret never
leaves the object: no view, log, repr or error shows it.

Cost: one keyed hash of a short string per token, about half a microsecond
(a BLAKE2b state keyed once per load is copied per token).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Protocol

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


class Keyed(Protocol):
    """What :func:`bind` and :func:`tagger` use of a queue state."""

    token_key: str
    tagger: Tagger | None


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
    gets one from ``random_bytes``, written with its next write; with
    ``random_bytes`` None it stays without (a read that must not invent one:
    it then shows no tokens)."""
    if not state.token_key:
        if random_bytes is None:
            state.tagger = None
            return
        state.token_key = new_key(random_bytes)
    state.tagger = Tagger(bytes.fromhex(state.token_key), queue)


def tagger(state: Keyed) -> Tagger:
    """The state's :class:`Tagger`; raises :class:`Unbound` if it has none."""
    found = state.tagger
    if found is None:
        raise Unbound("this queue state has no token key bound (broker.model.tokens.bind)")
    return found


def stored_part(wire: str) -> str:
    """The stored token within a client's token, unchecked (for tools that match a
    client's token to a job's stored lease, such as the chaos checker)."""
    token, sep, _ = wire.rpartition(SEP)
    return token if sep else wire
