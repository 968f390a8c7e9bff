"""Cancellations that arrive in the same turn of the event loop as an awaited result.

On Python 3.11 ``asyncio.wait_for`` swallows a cancellation that arrives once
the awaited thing is done but before its caller resumes: it returns the result
and the caller goes on as if never cancelled (``asyncio.timeout`` re-raises).
:func:`cancelled_as_answered` provokes exactly that window, deterministically
(no sleeps): the result is set, then the task is cancelled, both before any
task awaiting the result resumes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


async def cancelled_as_answered(awaitable: Awaitable[T], victim: asyncio.Task[Any]) -> T:
    """Await ``awaitable``; as its result arrives, cancel ``victim`` in the same
    turn (after the result is set, before whoever awaits this coroutine resumes).

    The answer reaches the awaiting task through a future whose first done
    callback is the cancel: callbacks run in the order added, so the cancel
    comes before the awaiting task's own wake-up (or that of a task
    ``asyncio.wait_for`` wrapped this coroutine in). Raises what
    ``awaitable`` raises (then ``victim`` is cancelled all the same)."""
    answered: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    answered.add_done_callback(lambda f: f.cancelled() or victim.cancel())
    inner = asyncio.ensure_future(awaitable)

    def forward(done: asyncio.Future[T]) -> None:
        if answered.done():  # (its awaiting task was cancelled first)
            return
        if done.cancelled():
            answered.cancel()
        elif (exc := done.exception()) is not None:
            answered.set_exception(exc)
        else:
            answered.set_result(done.result())

    inner.add_done_callback(forward)
    try:
        return await answered
    except asyncio.CancelledError:
        inner.cancel()
        raise
