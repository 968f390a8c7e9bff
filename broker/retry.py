"""The one retry policy for transient failures (storage calls, broker calls)."""

from __future__ import annotations

from typing import Any

from tenacity import Retrying, wait_exponential, wait_random


def retrying(*, retry: Any, stop: Any) -> Retrying:
    """Exponential backoff from 50 ms, capped at 2 s, with up to 50 ms of jitter;
    the last error is re-raised when ``stop`` says so."""
    return Retrying(retry=retry, stop=stop,
                    wait=wait_exponential(multiplier=0.05, max=2.0) + wait_random(0, 0.05),
                    reraise=True)
