"""A queue's dispatch rate limit: a token bucket on the owning broker's clock,
and a meter of the rate jobs are claimed at.

The queue settings ``max_claims_per_s`` (0: no limit) and ``claim_burst``
(0: one second's worth, at least 1) are stored in the queue object, so they
survive a takeover; the bucket's level is this broker's, in memory only (a
broker that takes a queue over, or starts, begins with a full bucket). One
token is one job: a claim takes at most as many jobs as there are whole
tokens (:meth:`ClaimGate.cap`, computed before the claim looks at any job),
and pays for the jobs it got (:meth:`ClaimGate.spend`). A claim beyond the
rate so gets fewer jobs, or none; a long-poll claim that got none waits. Its
wake-up: the commit loop's timer (:func:`broker.model.views.next_wakeup_ms`)
falls due when the next token does (:meth:`ClaimGate.wakeup_ms`), and the
due commit wakes the waiting claims (:meth:`ClaimGate.wake`), not before;
the timer stays due until they are woken.

Exact: the level is an integer count of nano-tokens, refilled at
``max_claims_per_s`` rounded *down* to a nano-token a millisecond, so over
any window of ``T`` ms no more than ``burst + max_claims_per_s * T / 1000``
jobs are handed out (``tests/unit/broker/model/test_ratelimit.py`` checks it with
hypothesis). A clock that moves back refills nothing until it passes the last
time seen again.

The refill itself is two pure functions (:func:`refill`, :func:`next_token_ms`),
shared with the per-group buckets of :mod:`broker.model.groups.buckets`.

Pure: no I/O, no clock (``now_ms`` is passed in); imports nothing of the model.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

#: Nano-tokens in one token (the level is kept in these, as an integer).
NANO = 1_000_000_000
#: The meter's window (s): the rate shown is the jobs claimed in the last
#: this many whole seconds, divided by it.
METER_WINDOW_S = 10


def effective_burst(rate_per_s: float, burst: int) -> int:
    """The bucket's size: ``burst``, or when 0 one second's worth (at least 1)."""
    return burst if burst > 0 else max(1, math.ceil(rate_per_s))


def nano_per_ms(rate_per_s: float) -> int:
    """Nano-tokens a millisecond at ``rate_per_s`` tokens a second, rounded down:
    never faster than the setting (0 for a rate below a nano-token a ms)."""
    return math.floor(rate_per_s * (NANO // 1000))


def refill(level: int, at_ms: int, now_ms: int, per_ms: int, cap: int) -> tuple[int, int]:
    """A bucket of ``level`` nano-tokens at ``at_ms``, refilled at ``per_ms``
    nano-tokens a ms up to ``cap`` nano-tokens: its ``(level, at_ms)`` at
    ``now_ms``. A ``now_ms`` not after ``at_ms`` (a clock that moved back)
    refills nothing and keeps ``at_ms``. Path-independent: refilling to ``t1``
    and then to ``t2`` gives what refilling to ``t2`` at once gives."""
    if now_ms > at_ms:
        return min(cap, level + (now_ms - at_ms) * per_ms), now_ms
    return level, at_ms


def next_token_ms(level: int, at_ms: int, now_ms: int, per_ms: int) -> int | None:
    """When a bucket of ``level`` nano-tokens at ``at_ms`` (already refilled to
    ``now_ms``, see :func:`refill`) has a whole token: ``now_ms`` if it has one,
    None if ``per_ms`` is 0 (it never will)."""
    short = NANO - level
    if short <= 0:
        return now_ms
    if per_ms == 0:
        return None
    return max(now_ms, at_ms) + -(-short // per_ms)


class TokenBucket:
    """``rate_per_s`` tokens a second, up to ``burst`` (starts full at ``now_ms``).

    Raises ``ValueError`` for a rate that is not positive or a burst below 1.
    """

    __slots__ = ("_at_ms", "_level", "_per_ms", "burst", "rate_per_s")

    def __init__(self, rate_per_s: float, burst: int, now_ms: int) -> None:
        if not rate_per_s > 0 or burst < 1:
            raise ValueError(f"a token bucket needs a rate > 0 and a burst >= 1, "
                             f"got {rate_per_s!r} and {burst!r}")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._per_ms = nano_per_ms(rate_per_s)
        self._level = burst * NANO
        self._at_ms = now_ms

    def _refill(self, now_ms: int) -> None:
        self._level, self._at_ms = refill(self._level, self._at_ms, now_ms, self._per_ms,
                                          self.burst * NANO)

    def available(self, now_ms: int) -> int:
        """Whole tokens at ``now_ms``."""
        self._refill(now_ms)
        return self._level // NANO

    def take(self, n: int, now_ms: int) -> int:
        """Take up to ``n`` whole tokens at ``now_ms``; how many were granted."""
        granted = min(max(0, n), self.available(now_ms))
        self._level -= granted * NANO
        return granted

    def next_token_ms(self, now_ms: int) -> int | None:
        """When the next whole token is there: ``now_ms`` if one is already, None
        if the rate is too small to ever make one (below a nano-token a ms)."""
        self._refill(now_ms)
        return next_token_ms(self._level, self._at_ms, now_ms, self._per_ms)


class ClaimMeter:
    """Jobs claimed per second, over the last :data:`METER_WINDOW_S` whole seconds."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}  # second since the epoch -> jobs claimed

    def add(self, n: int, now_ms: int) -> None:
        if n <= 0:
            return
        second = now_ms // 1000
        counts = self._counts
        counts[second] = counts.get(second, 0) + n
        if len(counts) > METER_WINDOW_S:
            for old in [s for s in counts if s <= second - METER_WINDOW_S]:
                del counts[old]

    def rate(self, now_ms: int) -> float:
        """Jobs claimed a second over the window that ends at ``now_ms``."""
        second = now_ms // 1000
        recent = sum(n for s, n in self._counts.items() if second - METER_WINDOW_S < s <= second)
        return recent / METER_WINDOW_S


class Limits(Protocol):
    """The settings the gate reads (a :class:`broker.model.state.QueueSettings` has them)."""

    max_claims_per_s: float
    claim_burst: int


class ClaimGate:
    """One queue's dispatch limit and claim rate, as the broker serving it keeps
    them (derived, never stored: ``QueueState.claims``). The bucket is made
    when first needed and again whenever the settings change."""

    __slots__ = ("_bucket", "_held", "meter")

    def __init__(self) -> None:
        self._bucket: TokenBucket | None = None
        self._held = False  # a claim got fewer jobs than it asked for, for want of tokens
        self.meter = ClaimMeter()

    def bucket(self, limits: Limits, now_ms: int) -> TokenBucket | None:
        """The bucket for ``limits`` (None: no limit)."""
        rate = limits.max_claims_per_s
        if not rate > 0:
            self._bucket = None
            return None
        burst = effective_burst(rate, limits.claim_burst)
        bucket = self._bucket
        if bucket is None or bucket.rate_per_s != rate or bucket.burst != burst:
            fresh = TokenBucket(rate, burst, now_ms)
            if bucket is not None:  # a changed setting keeps what was left, up to the new size
                fresh.take(burst - min(burst, bucket.available(now_ms)), now_ms)
            bucket = self._bucket = fresh
        return bucket

    def cap(self, limits: Limits, want: int, now_ms: int) -> int:
        """How many of the ``want`` jobs a claim at ``now_ms`` may take."""
        bucket = self.bucket(limits, now_ms)
        if bucket is None:
            return want
        tokens = bucket.available(now_ms)
        if tokens < want:
            self._held = True
        return min(want, tokens)

    def spend(self, limits: Limits, n: int, now_ms: int) -> None:
        """A claim at ``now_ms`` took ``n`` jobs (at most what :meth:`cap` allowed)."""
        self.meter.add(n, now_ms)
        bucket = self.bucket(limits, now_ms)
        if bucket is not None:
            bucket.take(n, now_ms)

    def wake(self, limits: Limits, now_ms: int) -> bool:
        """Whether claims waiting for jobs should be woken at ``now_ms`` (a token
        is there, or no limit); if so, they count as woken (see :meth:`wakeup_ms`)."""
        bucket = self.bucket(limits, now_ms)
        if bucket is not None and bucket.available(now_ms) < 1:
            return False
        self._held = False
        return True

    def wakeup_ms(self, limits: Limits, now_ms: int) -> int | None:
        """When claims held back by the limit may take a job again: the next
        token's time (``now_ms`` or before once there) from a claim that got
        fewer jobs than it asked for until :meth:`wake` woke the waiting ones;
        else None (no wake-up needed)."""
        bucket = self.bucket(limits, now_ms)
        if bucket is None or not self._held:
            return None
        return bucket.next_token_ms(now_ms)

    def figures(self, limits: Limits, now_ms: int) -> dict[str, Any]:
        """For stats and metrics: the claim rate (jobs a second over the last
        :data:`METER_WINDOW_S` s, on this broker), and the limit, its burst and
        the whole tokens left (each None without a limit)."""
        bucket = self.bucket(limits, now_ms)
        return {
            "claims_per_s": self.meter.rate(now_ms),
            "claim_limit_per_s": None if bucket is None else bucket.rate_per_s,
            "claim_burst": None if bucket is None else bucket.burst,
            "claim_tokens": None if bucket is None else bucket.available(now_ms),
        }
