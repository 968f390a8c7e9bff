"""Bytes kept, as tracemalloc counts them: what a call leaves allocated (its
result and whatever it stored), per item, for the tests that bound what the
broker retains (:func:`broker.wire.compact`). Counts memory, never time."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any


def traced_per(n: int, make: Callable[[], Any]) -> tuple[float, Any]:
    """Bytes still traced after ``make()`` (what it returned held alive) divided
    by ``n``, and what it returned."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = make()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / n, out
