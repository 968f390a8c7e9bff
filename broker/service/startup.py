"""A broker's start-up through transient storage errors.

SPEC §4 says transient errors never make a running broker abdicate; start-up
follows the same rule. Its reading steps (the store's self-test; listing the
store and loading every queue object, :meth:`broker.service.takeover.Takeover.load`)
are each run by :func:`ride_out`: a step that fails with a transient error
(``retryable``: ``StorageUnavailable`` for throttling, 5xx answers, timeouts,
connection errors and local disk errors; ``OutcomeUnknown``) is tried again
after a backoff (:data:`FIRST_S` doubling to :data:`CAP_S`, jittered), each
retry logged at warning, until the start-up time (``startup_timeout_s``,
counted from the start of start-up) has run out; then the last error is
raised, its message saying how long and how often it was tried.

Errors that will not go away are raised at once: ``StorageRefused`` (a missing
bucket or container, denied access or missing credentials, a read-only or
forbidden directory), ``UnsafeStore`` (the self-test caught the store
ignoring conditional writes), a ``StateError`` (a queue object that is
corrupt, foreign or of a newer format).

An attempt under way when the time runs out is not cut short (a slow store
that answers is not a fault; each storage call has its own timeout and
retries): no new attempt starts after it. Nothing a step retries writes
anything but the self-test's probe object, which the self-test removes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from broker.errors import OsqueueError
from broker.retry import REAL_TIME, Pause, backoff_delays

if TYPE_CHECKING:
    from broker.service.takeover import Takeover
    from broker.storage import ObjectStore

T = TypeVar("T")

log = logging.getLogger("osqueue.broker")

#: The first wait between two attempts of a start-up step, and the longest (s).
FIRST_S = 0.25
CAP_S = 5.0


async def start_up(store: ObjectStore, takeover: Takeover,
                   io: Callable[..., Awaitable[Any]], *, self_test: bool,
                   timeout_s: float, pause: Pause = REAL_TIME) -> tuple[int, int]:
    """A broker's start-up: the store's self-test (if ``self_test``), then
    :meth:`~broker.service.takeover.Takeover.load`, each ridden out (:func:`ride_out`)
    until ``timeout_s`` after now; then :meth:`~broker.service.takeover.Takeover.take_all`.
    ``io`` runs a store call off the event loop; ``pause`` is what the deadline
    is counted on and the backoff waits on (the loops' own, which ``takeover``
    loads with). Returns (served, existing)."""
    deadline = pause.now() + timeout_s
    if self_test:
        await ride_out("the store's self-test", lambda: io(store.self_test),
                       deadline=deadline, timeout_s=timeout_s, pause=pause)
    mine, existing = await ride_out("loading the queue objects",
                                    lambda: takeover.load(deadline),
                                    deadline=deadline, timeout_s=timeout_s, pause=pause)
    return await takeover.take_all(mine), existing


async def ride_out(what: str, step: Callable[[], Awaitable[T]], *, deadline: float,
                   timeout_s: float, pause: Pause = REAL_TIME) -> T:
    """``await step()``, again after each transient error until ``deadline``
    (``pause.now()`` seconds; ``timeout_s`` is the whole start-up time, for
    messages). ``what`` names the step in logs and errors ("the store's
    self-test"). Raises a non-retryable error at once, and the last transient
    one, re-worded (same class, code and details), once no time is left."""
    delays = backoff_delays(FIRST_S, CAP_S)
    started = pause.now()
    tries = 0
    while True:
        tries += 1
        try:
            return await step()
        except OsqueueError as exc:
            if not exc.retryable:
                raise
            last = exc
        left = deadline - pause.now()
        if left <= 0:
            raise type(last)(
                f"{what} kept failing for {pause.now() - started:.0f} s ({tries} "
                f"attempt{'s' if tries > 1 else ''}; the start-up time is {timeout_s:g} s): "
                f"{last.message}", **last.details) from None
        delay = min(next(delays), left)
        log.warning("start-up: %s failed (%s [%s]); attempt %d in %.1f s, %.0f s of the "
                    "%g s start-up time left", what, last.message, last.code, tries + 1,
                    delay, left, timeout_s)
        await pause.sleep(delay)
