"""An Event and a Lock that say when a coroutine parks on them, so a test can await
"the code under test is now waiting here" instead of reading asyncio's private
``_waiters``.

``waiting`` (an ``asyncio.Event``) is set just before a coroutine parks and
cleared once none is parked any more; ``parked`` counts those parked now. A
wait that returns at once (the event already set, the lock free) parks nothing.
Swap one in where the code under test makes or keeps its own (it must be in
place before the first wait a test watches for: one already parked is not
seen), e.g. :func:`parked_wakes` for the commit loops' wake-up events."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

import pytest

from broker.commit.loop import CommitLoop

T = TypeVar("T")


class _Parks:
    """``waiting`` and ``parked`` for the asyncio primitive it is mixed into."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = asyncio.Event()
        self.parked = 0

    async def _park(self, wait: Callable[[], Awaitable[T]]) -> T:
        self.parked += 1
        self.waiting.set()
        try:
            return await wait()
        finally:
            self.parked -= 1
            if not self.parked:
                self.waiting.clear()


class ParkedEvent(_Parks, asyncio.Event):
    """An ``asyncio.Event`` whose ``waiting`` is set while a ``wait()`` is parked."""

    async def wait(self) -> Literal[True]:
        if self.is_set():
            return True
        return await self._park(super().wait)


class ParkedLock(_Parks, asyncio.Lock):
    """An ``asyncio.Lock`` whose ``waiting`` is set while an ``acquire()`` is parked
    (called while the lock was held)."""

    async def acquire(self) -> Literal[True]:
        if not self.locked():
            return await super().acquire()
        return await self._park(super().acquire)


def parked_wakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every :class:`~broker.commit.loop.CommitLoop` made from now on in this test
    waits for work on a :class:`ParkedEvent` (its ``_wake``): its ``waiting`` is
    set while the loop is idle, waiting to be woken (or for its timer)."""
    init = CommitLoop.__init__

    def made(self: CommitLoop[Any, Any, Any], *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._wake = ParkedEvent()

    monkeypatch.setattr(CommitLoop, "__init__", made)


def wake_of(loop: CommitLoop[Any, Any, Any]) -> ParkedEvent:
    """The loop's wake-up event, made a :class:`ParkedEvent` by :func:`parked_wakes`
    (``AssertionError`` if it was not)."""
    wake = loop._wake
    assert isinstance(wake, ParkedEvent), "made before parked_wakes(monkeypatch)"
    return wake
