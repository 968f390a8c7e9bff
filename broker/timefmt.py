"""Times in the queue object: integer milliseconds in memory, ISO-8601 UTC text on disk.

Milliseconds are exact in both forms, so ``parse(fmt(ms)) == ms`` always.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def now_ms() -> int:
    """The wall clock in integer milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


_last_second: list[tuple[int, str]] = [(-1, "")]
_last_ms: list[tuple[int, str]] = [(-1, "")]


def fmt(ms: int) -> str:
    """``1700000000123`` -> ``"2023-11-14T22:13:20.123Z"``."""
    cached_ms, out = _last_ms[0]
    if cached_ms == ms:  # a commit stamps many jobs with the same millisecond
        return out
    secs, rem = divmod(ms, 1000)
    cached_secs, text = _last_second[0]
    if cached_secs != secs:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
        _last_second[0] = (secs, text)
    out = f"{text}.{rem:03d}Z"
    _last_ms[0] = (ms, out)
    return out


def parse(text: str) -> int:
    """Inverse of :func:`fmt`; accepts any ISO-8601 time with a zone (``Z`` or offset).

    Raises ``ValueError`` for anything else.
    """
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        raise ValueError(f"time {text!r} has no time zone")
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
