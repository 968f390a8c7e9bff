"""Times in the queue object: integer milliseconds in memory, ISO-8601 UTC text on disk.

Milliseconds are exact in both forms, so ``parse(fmt(ms)) == ms`` always.
"""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_ms() -> int:
    """The wall clock in integer milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


@functools.lru_cache(maxsize=4096)
def _second_text(secs: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))


# A commit formats the same few instants over and over (the run_at, created_at
# and lease times of thousands of jobs), so both levels are cached.
@functools.lru_cache(maxsize=1 << 16)
def fmt(ms: int) -> str:
    """``1700000000123`` -> ``"2023-11-14T22:13:20.123Z"``."""
    secs, rem = divmod(ms, 1000)
    return f"{_second_text(secs)}.{rem:03d}Z"


@functools.lru_cache(maxsize=1 << 16)
def fmt_bytes(ms: int) -> bytes:
    """:func:`fmt` as ASCII bytes, for byte templates."""
    return fmt(ms).encode()


def parse(text: str) -> int:
    """Inverse of :func:`fmt`; accepts any ISO-8601 time with a zone (``Z`` or offset).

    Raises ``ValueError`` for anything else.
    """
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        raise ValueError(f"time {text!r} has no time zone")
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
