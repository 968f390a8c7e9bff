"""Request keys of :class:`~osqueue_spark.client.QueueClient`'s keyed calls (push,
claim, purge, redrive): the ``Idempotency-Key`` that makes a repeat of a call
answer what the first attempt got (see :mod:`broker.model.receipts`).

A client numbers its calls (:class:`RequestNumbers`): ``r-{client}-{n}``, and
each call sends the client's floor, below which every call has its answer, so
the broker drops their receipts at once. A push of several batches is one
call: batch ``i`` > 0 goes as ``{key}.{i}`` (see :mod:`broker.model.calls`). A
caller may give a push its own key instead (:func:`push_key` checks it), sent
without a floor. What a push that ended part way raises is worded here too
(:func:`not_this_push`, :func:`reused_in_batch`, :func:`partly_pushed`).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, NamedTuple

from broker.errors import OsqueueError, RequestKeyReused
from broker.limits import MAX_REQUEST_KEY_CHARS
from osqueue_spark.args import InvalidArgument

#: The longest request key a caller may give ``push_many``: the broker's limit,
#: less room for a batch's part number (``.{i}``).
MAX_PUSH_KEY_CHARS = MAX_REQUEST_KEY_CHARS - 8


def push_key(key: Any) -> str:
    """A caller's push request key, checked as the broker checks the header (1 to
    :data:`MAX_PUSH_KEY_CHARS` printable ASCII characters, no space); raises
    ``InvalidArgument`` otherwise."""
    if not isinstance(key, str) or not 0 < len(key) <= MAX_PUSH_KEY_CHARS or not all(
            33 <= ord(c) < 127 for c in key):
        raise InvalidArgument(f"request_key must be 1..{MAX_PUSH_KEY_CHARS} printable ASCII "
                              "characters (no spaces), such as the request_key of the error "
                              "of the push to repeat")
    return key


class RequestNumbers:
    """Numbers this client's keyed calls: ``r-{client}-{n}``, and the floor below
    which every call has its answer (so the broker can drop their receipts).
    A forked copy of a client is another client (see ``QueueClient._own``)."""

    def __init__(self) -> None:
        self.client = uuid.uuid4().hex[:12]
        self._next = 0
        self._open: set[int] = set()
        self._lock = threading.Lock()

    def begin(self) -> int:
        with self._lock:
            n = self._next
            self._next += 1
            self._open.add(n)
            return n

    def key(self, n: int) -> str:
        return f"r-{self.client}-{n}"

    def floor(self) -> int:
        with self._lock:
            return min(self._open, default=self._next)

    def end(self, n: int) -> None:
        with self._lock:
            self._open.discard(n)


class KeyedCall(NamedTuple):
    """One keyed request: its key, and the numbering whose floor it carries (None
    for a key the caller gave: no floor)."""

    key: str
    numbering: RequestNumbers | None


def not_this_push(key: str, batch: int, answered: int, holds: int) -> str:
    """The message refusing a repeat under ``key`` whose batch ``batch`` (holding
    ``holds`` jobs) was answered with ``answered`` ids: the receipt of a batch cut
    differently, or of other jobs."""
    return (f"request key {key!r} names an earlier push whose batch {batch} held "
            f"{answered} job(s); this push's batch {batch} holds {holds}: repeat a push "
            "with the same jobs, in the same order, with the same batch_size and batch_bytes "
            "(this batch "
            "pushed nothing)")


def reused_in_batch(exc: RequestKeyReused, key: str, batch: int) -> RequestKeyReused:
    """``exc``, the broker's refusal of batch ``batch`` of a push under ``key``
    (its receipt holds other jobs), saying what a repeat must send."""
    return RequestKeyReused(
        f"{exc.message} (batch {batch} of this push under request key {key!r}: a repeat "
        "sends the same jobs in the same order with the same batch_size and batch_bytes)",
        **exc.details)


def partly_pushed(exc: OsqueueError, ids: list[str]) -> OsqueueError:
    """``exc``, a refusal of a later batch of a push whose earlier batches landed
    as ``ids``, saying so: ``details['pushed']`` (how many of the push's first
    jobs are in the queue) and ``details['ids']`` (theirs); none after them is."""
    return type(exc)(f"{exc.message}; the first {len(ids)} job(s) of this push were pushed "
                     "before it (exc.details['pushed'], their ids in exc.details['ids']) and "
                     "none after them: push the rest, not the whole list again",
                     **{**exc.details, "pushed": len(ids), "ids": list(ids)})
