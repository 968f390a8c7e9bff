"""Garbage-collector tuning for the broker's own process, and only there.

A broker holds a large, slowly growing heap of jobs with no reference cycles,
and a commit that pushes a million jobs allocates millions of objects more.
Two tricks keep the cyclic collector from scanning them over and over (which
would double the cost of a large commit):

* :func:`tune_for_broker_process` raises the collection thresholds, so the
  young generation is collected less often;
* :func:`gc_paused` (and :func:`gc_paused_for`) switch the collector off around
  a burst of allocation. Reference counting still frees everything without
  cycles, and the collector runs as soon as the last pause ends. Pauses nest
  and may overlap across threads; a collector the process had switched off
  stays off. A pause that ends with a burst of new objects still alive (a
  million new jobs) moves them straight to the oldest generation: the young
  collection that would otherwise follow scans them all only to promote them
  (0.6 s for a 1M-job publish, ``bench/broker_bench.py``). They are scanned at
  the next full collection like any old object.

Both are process-wide settings, so they are opt-in: only the broker's own
entry point (``python -m broker`` / ``osqueue-broker``, :func:`broker.cli.main`)
calls :func:`tune_for_broker_process`. Until it is called, :func:`gc_paused`
and :func:`gc_paused_for` do nothing, so a broker embedded in a user's process
(``osqueue_spark.start_broker`` in a Spark driver or a notebook) and every
client leave the process's collector exactly as they found it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

#: Collection thresholds (generation 0, 1, 2) the broker's process raises the
#: collector's to, at least: the young generation is collected every 50,000 net
#: allocations instead of CPython's default few hundred.
BROKER_GC_THRESHOLDS = (50_000, 20, 1_000)

#: Young objects left at the end of a pause beyond which they skip the young
#: generations (see the module docstring).
BURST_OBJECTS = 100_000

#: Items in a batch below which pausing costs more than it saves.
SMALL_BATCH = 256

_lock = threading.Lock()
_depth = 0
_restore = False
_tuned = False
_NOTHING: AbstractContextManager[None] = nullcontext()  # reusable: enters and exits to nothing


def tune_for_broker_process() -> None:
    """Make this process a broker's: raise the collection thresholds to at least
    :data:`BROKER_GC_THRESHOLDS` and let :func:`gc_paused` pause the collector.

    Call it only from a process that exists to run a broker (its entry point),
    never from a library call: it changes the collector for the whole process.
    Idempotent; thresholds already higher are kept.
    """
    global _tuned
    current = gc.get_threshold()
    gc.set_threshold(*(max(have, want) for have, want in
                       zip(current, BROKER_GC_THRESHOLDS, strict=True)))
    _tuned = True


def tuned() -> bool:
    """True once :func:`tune_for_broker_process` ran in this process."""
    return _tuned


def gc_paused() -> AbstractContextManager[None]:
    """A context that pauses the collector while it runs, in a tuned broker
    process; in any other process a context that does nothing."""
    return _paused() if _tuned else _NOTHING


def gc_paused_for(items: int) -> AbstractContextManager[None]:
    """:func:`gc_paused` around work on a batch of ``items``; nothing for a small one."""
    return _paused() if _tuned and items > SMALL_BATCH else _NOTHING


def _age_burst() -> None:
    """Move every tracked object to the oldest generation, unscanned, if a burst
    left many young ones and nobody else uses the permanent generation."""
    if gc.get_count()[0] > BURST_OBJECTS and gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()  # puts them back, into the oldest generation


@contextmanager
def _paused() -> Iterator[None]:
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
