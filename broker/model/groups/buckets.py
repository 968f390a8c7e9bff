"""Per-group token buckets (``group_rate_per_s``, ``group_burst``), in bounded memory.

One bucket per group, on the owning broker's clock, with the queue-wide
limit's exact rule (:mod:`broker.model.ratelimit`: integer nano-tokens, the
rate rounded down to a nano-token a millisecond, the same :func:`refill`), so
over any window of ``T`` ms a group is granted at most ``burst + rate * T /
1000`` jobs by one owner. Derived, never stored: a broker that takes a queue
over starts with every bucket full (as ``max_claims_per_s`` does).

**A bucket that would be full equals no bucket**: a missing one is full, so
a bucket is kept only while it is short of full. :meth:`GroupBuckets.sweep`
(once per commit) drops those that have refilled, popping a heap that holds
exactly one entry per bucket (its full time; re-pushed, later, when the bucket
was taken from since). Memory is O(groups that took a token within the last
``burst / rate`` seconds), never O(groups ever seen). (A rate below a
nano-token a millisecond, 0.000001 a second, would never refill: configure
refuses rates below ``MIN_RATE_PER_S``; an object an older broker stored with
one keeps its buckets until the rate changes.)

A clock that steps back refills nothing: a bucket refills from its own latest
time on, and a new one starts at the latest time any was asked at.

Pure: no I/O, no clock (``now_ms`` is passed in).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from broker.model.ratelimit import NANO, effective_burst, nano_per_ms, next_token_ms, refill

_GID_BITS = 32
_GID_MASK = (1 << _GID_BITS) - 1


@dataclass(frozen=True, slots=True)
class GroupRate:
    """A per-group rate: ``rate_per_s`` tokens a second (> 0), up to ``burst``
    (>= 1: the effective size, see :meth:`of`); ``per_ms`` and ``cap`` are the
    same in nano-tokens (a ms, and the bucket's size)."""

    rate_per_s: float
    burst: int
    per_ms: int
    cap: int

    @classmethod
    def of(cls, rate_per_s: float, burst: int) -> GroupRate | None:
        """The rate of settings ``group_rate_per_s`` and ``group_burst`` (0: one
        second's worth, at least 1); None when the rate is 0 (no limit)."""
        if not rate_per_s > 0:
            return None
        size = effective_burst(rate_per_s, burst)
        return cls(rate_per_s, size, nano_per_ms(rate_per_s), size * NANO)


class GroupBuckets:
    """The token buckets of a queue's groups, by gid, at one :class:`GroupRate`.

    Group ids must be below ``2**32``. A gid that has a bucket here must not be
    released for reuse (:meth:`__contains__`): its next owner would inherit
    the bucket.
    """

    __slots__ = ("_at", "_due", "_latest", "_level", "rate")

    def __init__(self, rate: GroupRate) -> None:
        self.rate = rate
        # The latest time (ms) asked at: a new bucket starts there, never earlier, so
        # a clock that steps back refills nothing twice (a bucket first taken from
        # after the step would else refill the stretch back to the latest time again).
        self._latest = 0
        self._level: dict[int, int] = {}  # gid -> nano-tokens (short of full)
        self._at: dict[int, int] = {}  # gid -> the time (ms) of that level
        self._due: list[int] = []  # full_at_ms << 32 | gid, one per bucket (see sweep)

    def _refilled(self, gid: int, now_ms: int) -> int:
        level = self._level.get(gid)
        if level is None:
            return self.rate.cap
        rate = self.rate
        level, at = refill(level, self._at[gid], now_ms, rate.per_ms, rate.cap)
        self._level[gid], self._at[gid] = level, at
        return level

    def _full_at(self, gid: int) -> int | None:
        short = self.rate.cap - self._level[gid]
        per_ms = self.rate.per_ms
        return None if per_ms == 0 else self._at[gid] + -(-short // per_ms)

    def _schedule(self, gid: int) -> None:
        full_at = self._full_at(gid)
        if full_at is not None:
            heapq.heappush(self._due, (full_at << _GID_BITS) | gid)

    def _seen(self, now_ms: int) -> None:
        if now_ms > self._latest:
            self._latest = now_ms

    def available(self, gid: int, now_ms: int) -> int:
        """Whole tokens group ``gid`` has at ``now_ms``."""
        self._seen(now_ms)
        return self._refilled(gid, now_ms) // NANO

    def take(self, gid: int, n: int, now_ms: int) -> int:
        """Take up to ``n`` whole tokens of group ``gid`` at ``now_ms``; how many were granted."""
        self._seen(now_ms)
        level = self._refilled(gid, now_ms)
        granted = min(max(0, n), level // NANO)
        if granted:
            fresh = gid not in self._level
            self._level[gid] = level - granted * NANO
            if fresh:  # (from the latest time seen: the clock may have stepped back)
                self._at[gid] = self._latest
                self._schedule(gid)
        return granted

    def next_token_ms(self, gid: int, now_ms: int) -> int | None:
        """When group ``gid`` has a whole token: ``now_ms`` if it has one now,
        None if the rate never makes one (below a nano-token a millisecond)."""
        self._seen(now_ms)
        level = self._refilled(gid, now_ms)
        at = self._at.get(gid, now_ms)
        return next_token_ms(level, at, now_ms, self.rate.per_ms)

    def sweep(self, now_ms: int) -> int:
        """Drop the buckets that are full at ``now_ms`` (they equal no bucket);
        how many were dropped. O(log buckets) a bucket popped."""
        self._seen(now_ms)
        due, dropped = self._due, 0
        while due and (due[0] >> _GID_BITS) <= now_ms:
            gid = heapq.heappop(due) & _GID_MASK
            if gid not in self._level:
                continue
            if self._refilled(gid, now_ms) >= self.rate.cap:
                del self._level[gid], self._at[gid]
                dropped += 1
            else:  # taken from since it was scheduled: full later
                self._schedule(gid)
        return dropped

    def reconfigure(self, rate: GroupRate, now_ms: int) -> None:
        """Change the rate at ``now_ms``: a bucket short of full keeps its whole
        tokens, up to the new size (as the queue-wide limit does on a change of
        its settings); a full one is full at the new size, as a missing one
        (so a swept bucket and an unswept full one stay alike); O(buckets)."""
        if rate == self.rate:
            return
        self._seen(now_ms)
        cap = self.rate.cap
        levels = {gid: level // NANO for gid in list(self._level)
                  if (level := self._refilled(gid, now_ms)) < cap}
        self.rate = rate
        self._level.clear()
        self._at.clear()
        self._due = []
        for gid, tokens in levels.items():
            level = min(rate.burst, tokens) * NANO
            if level < rate.cap:
                self._level[gid], self._at[gid] = level, self._latest
                self._schedule(gid)

    def __len__(self) -> int:
        """Buckets kept (groups short of a full bucket)."""
        return len(self._level)

    def __contains__(self, gid: object) -> bool:
        return gid in self._level

    def __iter__(self) -> Iterator[int]:
        """The gids that have a bucket (short of full): ids that must not be released."""
        return iter(list(self._level))
