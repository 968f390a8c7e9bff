"""The commit loop's storage calls: off the event loop, with one error vocabulary.

A store's methods block, so the loop runs them in its executor
(:func:`run_io`); an ``OSError`` a store let through is a storage fault and
becomes ``StorageUnavailable``. A re-read of the committed object
(:func:`read_retrying`) retries transient failures with the one backoff
(:mod:`broker.retry`) until the batch's deadline, then raises :class:`Expired`.
:func:`run_io` is the one way a store call leaves the event loop: the commit
loop, takeover, staging and the archiver all call it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from broker.errors import (
    BrokerUnavailable,
    NotFound,
    StorageError,
    StorageRefused,
    StorageUnavailable,
)
from broker.gcpause import gc_paused
from broker.retry import REAL_TIME, Pause, backoff_delays
from broker.storage import ObjectStore, Versioned

log = logging.getLogger("osqueue.commit")


class Expired(Exception):
    """The batch's time ran out while storage kept failing (``last``: its last error)."""

    def __init__(self, last: BaseException | None) -> None:
        self.last = last


def storage_error(exc: OSError) -> StorageUnavailable:
    """``exc`` as the storage fault it is, naming its errno."""
    name = errno.errorcode.get(exc.errno or 0, "") if exc.errno else ""
    return StorageUnavailable(
        f"storage I/O error {name or type(exc).__name__}: {exc.strerror or exc}")


def _gc_paused_call(fn: Callable[..., Any], *args: Any) -> Any:
    with gc_paused():
        return fn(*args)


async def run_io(executor: Executor, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in ``executor``; an ``OSError`` is raised as ``StorageUnavailable``,
    and an executor already shut down (the broker stopping: a request that raced
    its stop) refuses the call as ``BrokerUnavailable``, not a bare ``RuntimeError``."""
    try:
        call = asyncio.get_running_loop().run_in_executor(executor, fn, *args)
    except RuntimeError as exc:  # (raised only by the scheduling: not fn's own)
        raise BrokerUnavailable("broker is shutting down") from exc
    try:
        return await call
    except OSError as exc:  # a store that let one through: it is a storage fault
        raise storage_error(exc) from exc


async def run_bulk(executor: Executor, fn: Callable[..., Any], *args: Any) -> Any:
    """:func:`run_io` with the garbage collector paused for the call: for a call
    that makes many objects at once (parsing a queue object or a staged chunk;
    see :mod:`broker.gcpause` for why)."""
    return await run_io(executor, _gc_paused_call, fn, *args)


async def read_retrying(executor: Executor, store: ObjectStore, key: str,
                        deadline: float, pause: Pause = REAL_TIME) -> Versioned | None:
    """The object ``key`` (None if it does not exist), retrying transient
    failures until ``deadline`` (``pause.now()`` seconds), the backoff waited
    on ``pause``. Raises :class:`Expired` past the deadline and
    ``StorageRefused`` at once."""
    delays = backoff_delays()
    while True:
        try:
            got: Versioned = await run_io(executor, store.read, key)
            return got
        except NotFound:
            return None
        except StorageRefused:
            raise
        except StorageError as exc:
            delay = next(delays)
            if pause.now() + delay > deadline:
                raise Expired(exc) from None
            log.warning("re-read of %s failed (%s); retrying in %.2fs", key, exc, delay)
            await pause.sleep(delay)
