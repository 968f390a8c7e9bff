"""broker.commit.offloop.run_io: the one way a store call leaves the event loop."""

from __future__ import annotations

import asyncio
import errno
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker.commit.offloop import run_io
from broker.errors import BrokerUnavailable, StorageUnavailable


def test_a_call_on_an_executor_already_shut_down_is_refused_as_broker_unavailable() -> None:
    """A request racing the broker's stop (its executor shut down) is told the
    broker is shutting down (a 503 a client retries elsewhere), not a bare
    RuntimeError (a 500); the call is never made."""
    executor = ThreadPoolExecutor(1)
    executor.shutdown()
    made: list[int] = []
    with pytest.raises(BrokerUnavailable, match="shutting down"):
        asyncio.run(run_io(executor, made.append, 1))
    assert made == []


def test_a_call_raising_runtime_error_itself_is_not_taken_for_a_shutdown() -> None:
    def fails() -> None:
        raise RuntimeError("the store's own")

    with ThreadPoolExecutor(1) as executor, pytest.raises(RuntimeError, match="store's own"):
        asyncio.run(run_io(executor, fails))


def test_an_os_error_is_a_storage_fault() -> None:
    def fails() -> None:
        raise OSError(errno.EIO, "disk")

    with ThreadPoolExecutor(1) as executor, pytest.raises(StorageUnavailable, match="EIO"):
        asyncio.run(run_io(executor, fails))
