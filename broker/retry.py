"""The one backoff for transient failures: storage calls, broker calls, timers.

A delay doubles from ``first_s`` up to ``cap_s`` (:func:`backoff_s`); a
retried call waits a jittered delay, uniform in [0.5, 1.5) times it
(:func:`jittered`), so clients that failed together do not retry together.
:func:`retrying` is the synchronous form (a tenacity ``Retrying``);
:func:`backoff_delays` the asynchronous one (``await asyncio.sleep(delay)``
per failure), waiting on a :class:`Pause` where a test may skip the waits.
All times in seconds.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from typing import Any

from tenacity import RetryCallState, Retrying

#: The default schedule: 50 ms doubling to 2 s.
FIRST_S = 0.05
CAP_S = 2.0


def backoff_s(failures: int, first_s: float = FIRST_S, cap_s: float = CAP_S) -> float:
    """The delay after ``failures`` failures in a row (1: ``first_s``), at most ``cap_s``."""
    return min(cap_s, first_s * 2 ** min(max(failures - 1, 0), 62))


def jittered(delay_s: float) -> float:
    """``delay_s`` times a random factor in [0.5, 1.5)."""
    return delay_s * (0.5 + random.random())


def backoff_delays(first_s: float = FIRST_S, cap_s: float = CAP_S) -> Iterator[float]:
    """Jittered delays for one retried call, without end: the caller stops."""
    failures = 0
    while True:
        failures += 1
        yield jittered(backoff_s(failures, first_s, cap_s))


def retrying(*, retry: Any, stop: Any, first_s: float = FIRST_S,
             cap_s: float = CAP_S, before_sleep: Any = None) -> Retrying:
    """A tenacity ``Retrying`` waiting :func:`backoff_delays`' schedule between
    attempts; the last error is re-raised when ``stop`` says so. ``before_sleep``
    (tenacity's hook, given the ``RetryCallState``) runs before each wait: where
    a retry is logged."""

    def wait(state: RetryCallState) -> float:
        return jittered(backoff_s(state.attempt_number, first_s, cap_s))

    return Retrying(retry=retry, stop=stop, wait=wait, reraise=True,
                    before_sleep=before_sleep)


class Pause:
    """How a retry loop waits out its backoff: :meth:`now` (monotonic seconds,
    what its deadline is counted on) and :meth:`sleep`. This one waits in real
    time (``time.monotonic``, ``asyncio.sleep``); a test injects one that skips
    the waits and counts them as elapsed (``tests/support/pause.py``), so a
    backoff schedule and its deadline run through without wall time."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


#: The real-time :class:`Pause`, every caller's default.
REAL_TIME = Pause()
