"""Pause Python's cyclic garbage collector around bursts of allocation.

A commit that pushes a million jobs allocates millions of objects with no
reference cycles; the collector, triggered by the allocation count, would
scan them (and the rest of the queue) over and over and double the cost.
Pausing it for the burst is safe: reference counting still frees everything
without cycles, and the collector runs as soon as the last pause ends.
Pauses nest and may overlap across threads; a collector the process had
switched off stays off.

A pause that ends with a burst of new objects still alive (a million new jobs)
moves them straight to the oldest generation: the young collection that would
otherwise follow scans them all only to promote them (0.6 s for a 1M-job
publish). They are scanned at the next full collection like any old object.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

_lock = threading.Lock()
_depth = 0
_restore = False

#: Young objects left at the end of a pause beyond which they skip the young
#: generations (see the module docstring).
BURST_OBJECTS = 100_000


def _age_burst() -> None:
    """Move every tracked object to the oldest generation, unscanned, if a burst
    left many young ones and nobody else uses the permanent generation."""
    if gc.get_count()[0] > BURST_OBJECTS and gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()  # puts them back, into the oldest generation


#: Items in a batch below which pausing costs more than it saves.
SMALL_BATCH = 256


def gc_paused_for(items: int) -> AbstractContextManager[None]:
    """:func:`gc_paused` around work on a batch of ``items``; nothing for a small one."""
    return gc_paused() if items > SMALL_BATCH else nullcontext()


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
                _age_burst()
                gc.enable()
