"""A :class:`broker.retry.Pause` that skips its waits: a backoff schedule and the
deadline it is counted against run through in no wall time, in order."""

from __future__ import annotations

import asyncio
import time

from broker.retry import Pause


class SkippedPause(Pause):
    """``now()`` is ``time.monotonic()`` plus every wait skipped so far; ``sleep``
    records its delay (``slept``), counts it as elapsed and only yields to the
    event loop once. A deadline counted on ``now()`` thus expires after as much
    backoff as in real time, however fast the waits went."""

    def __init__(self) -> None:
        self.skipped = 0.0
        self.slept: list[float] = []

    def now(self) -> float:
        return time.monotonic() + self.skipped

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.skipped += max(seconds, 0.0)
        await asyncio.sleep(0)
