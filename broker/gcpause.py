"""Pause Python's cyclic garbage collector around bursts of allocation.

A commit that pushes a million jobs allocates millions of objects with no
reference cycles; the collector, triggered by the allocation count, would
scan them (and the rest of the queue) over and over and double the cost.
Pausing it for the burst is safe: reference counting still frees everything
without cycles, and the collector runs as soon as the last pause ends.
Pauses nest and may overlap across threads; a collector the process had
switched off stays off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_restore = False


@contextmanager
def gc_paused() -> Iterator[None]:
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()
