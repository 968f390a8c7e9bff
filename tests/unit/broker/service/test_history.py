"""The dashboard's history (broker.service.history): bounded per queue and in
queues, per-interval differences for the charts, the commit rate, and a
broker's sampling of the queues it serves (through their commit loops), which
a cancellation ends whenever it comes."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import Any, cast

import pytest

from broker.model.ops import CompleteItem, FailItem, Inspect
from broker.service.broker import Broker
from broker.service.history import History
from broker.storage import MemoryStore
from tests.support.inprocess import run, started
from tests.support.same_turn import cancelled_as_answered


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def detached(**kw: Any) -> History:
    """A history not tied to a broker (record and read only)."""
    return History(cast(Broker, None), **kw)


def test_a_queue_keeps_one_window_of_samples_in_bounded_bytes() -> None:
    history = detached(interval_s=10, window_s=60)
    assert history.capacity == 7
    for i in range(100):
        history.record("q", i * 10_000, i, i, 0, 0, 5, i)
    kept = history.samples("q")
    assert [s[0] for s in kept] == [i * 10_000 for i in range(93, 100)]
    hour = detached()  # the default: 10 s over an hour
    for i in range(2 * hour.capacity):
        hour.record("q", i, 2**40 + i, 2**40, 2**40, 2**40, 2**40, 2**40)
    samples = hour._samples["q"]
    size = sys.getsizeof(samples) + sum(map(sys.getsizeof, samples))
    assert len(samples) == 361 and size < 40_000, size


def test_at_most_max_queues_are_kept_the_longest_unsampled_going_first() -> None:
    history = detached(max_queues=3)
    for name in ("a", "b", "c"):
        history.record(name, 0, 0, 0, 0, 0, 0, 0)
    history.record("a", 1, 0, 0, 0, 0, 0, 0)  # a sampled again: b is now the oldest
    history.record("d", 2, 0, 0, 0, 0, 0, 0)
    assert len(history) == 3
    assert history.samples("b") == [] and len(history.samples("a")) == 2


def test_the_series_are_differences_per_interval_never_negative() -> None:
    history = detached(interval_s=10)
    assert history.series("q")["t"] == []
    history.record("q", 10_000, 100, 0, 0, 0, 100, 1)
    assert history.series("q")["t"] == []  # one sample: no interval yet
    history.record("q", 20_000, 150, 30, 5, 1, 119, 4)
    history.record("q", 30_000, 140, 30, 5, 1, 109, 6)  # (a total going back: 0, not -10)
    series = history.series("q")
    assert series["t"] == [20.0, 30.0]
    assert series["enqueued"] == [50, 0]
    assert series["completed"] == [30, 0]
    assert series["failed"] == [5, 0]
    assert series["dead"] == [1, 0]
    assert series["depth"] == [119, 109]
    assert series["interval_s"] == 10


def test_the_commit_rate_looks_at_the_last_minute() -> None:
    clock = Clock()
    history = detached(interval_s=10, clock=clock)
    assert history.commit_rate("q") is None
    start = clock.ms - 120_000
    for i in range(13):  # every 10 s for two minutes: 1 commit/s, then 5/s in the last minute
        commits = i * 10 if i <= 6 else 60 + (i - 6) * 50
        history.record("q", start + i * 10_000, 0, 0, 0, 0, 0, commits)
    assert history.commit_rate("q") == 5.0
    assert history.commit_rate("q", commits_now=360) == 5.0  # (now = the last sample's time)


def test_a_broker_samples_the_queues_it_serves_through_their_loops() -> None:
    async def main() -> None:
        store = MemoryStore()
        broker = await started(store)
        try:
            history = History(broker, interval_s=1, window_s=60)
            assert await history.sample() == 0
            await broker.create_queue("q", {"max_attempts": 1})
            await broker.push("q", [b"1", b"2", b"3"])
            assert await history.sample() == 1
            claimed = await broker.claim("q", "w", 2)
            await broker.complete("q", [CompleteItem(claimed[0].token)])
            await broker.fail("q", [FailItem(claimed[1].token, "boom", None)])
            await broker.push("q", [b"4"])
            assert await history.sample() == 1
            series = history.series("q")
            assert series["enqueued"][-1] == 1 and series["completed"][-1] == 1
            assert series["failed"][-1] == 1 and series["dead"][-1] == 1
            assert series["depth"][-1] == 3  # 2 pending, 1 dead
            assert history.commit_rate("q") is not None
            broker.takeover.known.discard("q")  # as if it left the store
            broker._queues.pop("q")
            await history.sample()
            assert len(history) == 0
        finally:
            await broker.stop(5)

    run(main())


def test_a_totals_rate_looks_at_the_last_minute() -> None:
    history = detached(interval_s=10)
    assert history.total_rate("q", "completed") is None
    history.record("q", 0, 0, 0, 0, 0, 0, 0)
    assert history.total_rate("q", "completed") is None  # one sample: no rate yet
    for i in range(1, 13):  # 1 completed a second, then 4 a second in the last minute
        done = i * 10 if i <= 6 else 60 + (i - 6) * 40
        history.record("q", i * 10_000, 0, done, 2 * i, 0, 0, 0)
    assert history.total_rate("q", "completed") == 4.0
    assert history.total_rate("q", "failed") == 0.2


def test_a_sampling_cancelled_as_its_queue_answers_ends_and_records_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampling task cancelled in the same turn as a queue's counters are
    answered ends cancelled with no sample taken (``asyncio.wait_for`` swallowed
    that cancellation on Python 3.11: the sample was recorded as if never
    cancelled)."""
    async def main() -> None:
        broker = await started(MemoryStore())
        try:
            history = History(broker, interval_s=1, window_s=60)
            await broker.push("q", [b"1"])
            q = broker.served("q")
            assert q is not None
            submit = q.loop.submit
            sampling: list[asyncio.Task[int]] = []

            def inspect_cancelling(op: Any) -> Awaitable[Any]:
                if isinstance(op, Inspect):  # (answered, and the sampling cancelled, in one turn)
                    return cancelled_as_answered(submit(op), sampling[0])
                return submit(op)

            monkeypatch.setattr(q.loop, "submit", inspect_cancelling)
            sampling.append(asyncio.create_task(history.sample()))
            await asyncio.wait(sampling, timeout=20)
            task, = sampling
            assert (task.done() and task.cancelled(), history.samples("q")) == (True, [])
        finally:
            await broker.stop(5)

    run(main())
