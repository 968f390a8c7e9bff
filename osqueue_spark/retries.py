"""How :class:`~osqueue_spark.client.QueueClient` retries one call.

An error whose class is ``retryable`` is retried with :mod:`broker.retry`'s
backoff for up to the client's ``retry_s`` (seconds), then raised. Each retry
is logged (logger ``osqueue.client``, warning): the method, the broker's URL
(scheme, host and port: never user-info) and path, the attempt, the error's
class and message. Messages never carry the token.

**First contact.** A connection that cannot be made (``BrokerUnreachable``)
to brokers none of which has answered a request in this process (any
client's) is retried for :data:`FIRST_CONTACT_S` only: a mistyped port or a
broker that is not running is said within seconds, as ``BrokerUnreachable``
"nothing listens at URL: is the broker running?", instead of after
``retry_s`` in silence. Once a broker URL has answered (any HTTP status),
a broker there that restarts or is taken over is ridden out for the whole
``retry_s``. (A process that made no call yet, such as a Spark worker's
first task, starts without that knowledge.) A call one of whose attempts may
have reached a broker (the connection was made, the answer never came: a
broker killed right after it committed the call) is never cut short so: its
outcome is unknown, and only a repeat answered by a broker tells it (the
same ids, ``duplicate`` for a publish), so it is retried for ``retry_s``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from tenacity import RetryCallState, retry_if_exception

from broker.errors import BrokerUnreachable, OsqueueError
from broker.retry import retrying
from osqueue_spark.transport import origin

T = TypeVar("T")

#: How long (s) a call retries connection failures while none of its brokers has
#: ever answered in this process.
FIRST_CONTACT_S = 3.0

log = logging.getLogger("osqueue.client")

#: Broker URLs that have answered a request in this process (any client).
_ANSWERED: set[str] = set()


def answered(url: str) -> None:
    """Note that the broker at ``url`` answered a request."""
    if url not in _ANSWERED:
        _ANSWERED.add(url)


def answered_before(urls: Iterable[str]) -> bool:
    """Whether any of ``urls`` has answered a request in this process."""
    return any(u in _ANSWERED for u in urls)


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, OsqueueError) and exc.retryable


class Attempts:
    """The attempts of one call: ``method`` ``path`` retried for ``retry_s``;
    ``brokers()`` gives the client's broker URLs at the moment (for the
    first-contact rule). The caller sets :attr:`url` before each attempt and
    reports each failed connection with :meth:`failed`."""

    def __init__(self, method: str, path: str, retry_s: float,
                 brokers: Callable[[], Iterable[str]]) -> None:
        self.method, self.path, self.retry_s, self.brokers = method, path, retry_s, brokers
        self.url = ""  # the URL of the current attempt ("": found from the store)
        self.unreached: list[str] = []  # origins that refused, in order
        self.reached = False  # an attempt may have reached a broker (outcome unknown)
        self._early = False

    def failed(self, url: str, exc: OsqueueError) -> None:
        """Note the failure ``exc`` (a ``BrokerUnavailable``) of the attempt at ``url``."""
        if not isinstance(exc, BrokerUnreachable):
            self.reached = True  # connected: the request may have been received
        elif url:
            self.unreached.append(origin(url))

    def run(self, once: Callable[[], T]) -> T:
        """``once()``, retried as the module docstring says; raises its last error,
        or the first-contact ``BrokerUnreachable``."""
        began = time.monotonic()
        try:
            return retrying(retry=retry_if_exception(_retryable), stop=self._stop,
                            before_sleep=self._log)(once)
        except BrokerUnreachable as exc:
            if not self._early:
                raise
            raise nothing_listens(exc, self.unreached, time.monotonic() - began) from None

    def _stop(self, state: RetryCallState) -> bool:
        elapsed = state.seconds_since_start or 0.0
        if elapsed >= self.retry_s:
            return True
        outcome = state.outcome
        if (elapsed >= FIRST_CONTACT_S and self.unreached and not self.reached
                and outcome is not None
                and isinstance(outcome.exception(), BrokerUnreachable)
                and not answered_before(self.brokers())):
            self._early = True
            return True
        return False

    def _log(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        where = origin(self.url) + self.path if self.url else f"{self.path} (broker not found)"
        log.warning("osqueue client: %s %s failed (attempt %d, %s: %s); retrying in %.2f s",
                    self.method, where, state.attempt_number, type(exc).__name__, exc,
                    state.next_action.sleep if state.next_action is not None else 0.0)


def nothing_listens(last: BrokerUnreachable, unreached: list[str],
                    elapsed_s: float) -> BrokerUnreachable:
    """The error for a first contact that never connected: where, and the likely cause."""
    where = " or ".join(dict.fromkeys(unreached))
    why = last.message
    if why.startswith("cannot reach broker at "):  # (the transport's message: keep the why)
        why = why.split(": ", 1)[-1]
    head = (f"nothing listens at {where}: is the broker running?"
            if "Connection refused" in why else
            f"no broker could be reached at {where}: is the URL right, and the broker running?")
    return BrokerUnreachable(f"{head} ({why}; {len(unreached)} attempt(s) in {elapsed_s:.1f} s; "
                             "none of this client's brokers has answered in this process)")
