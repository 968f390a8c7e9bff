"""One queue this broker serves: its commit loop and target, its archiver, and
the event that wakes the long polls waiting for its jobs.

:class:`ServedQueue` wires them together: the archiver pokes the loop when
archived jobs may be dropped, and every commit (or due timer) wakes the
claims waiting for jobs. A broker makes one per queue it loads or serves
(see :meth:`broker.service.broker.Broker.make_queue`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from broker import paths
from broker.commit.loop import CommitLoop
from broker.errors import UnknownQueue
from broker.model import state as S
from broker.model.ops import Op, Push, PushPayloads, Result, push_of
from broker.model.spills import has_due
from broker.retry import REAL_TIME, Pause
from broker.service.archiver import Archiver
from broker.service.by_reference import (
    StagedPublish,
    publish_by_reference,
    push_by_reference,
    wanted,
)
from broker.service.ownership import Ownership
from broker.service.queue_target import QueueTarget
from broker.service.segment_store import SegmentStore
from broker.storage import ObjectStore

#: The commit loop of one queue.
QueueLoop = CommitLoop[S.QueueState, Op, Result]


class RecentRate:
    """How fast a total grows, per minute over the last :data:`WINDOW_S`, from
    (time, total) samples: one a second at most, taken at commits (the only
    time a total changes). Bounded: the samples of one window and one before."""

    WINDOW_S = 60.0

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()
        self._latest = 0

    def observe(self, at_s: float, total: int) -> None:
        """The total is ``total`` at ``at_s`` (monotonic seconds)."""
        self._latest = total
        samples = self._samples
        if not samples or at_s - samples[-1][0] >= 1.0:
            samples.append((at_s, total))
        self._prune(at_s)

    def _prune(self, now_s: float) -> None:
        samples = self._samples
        while len(samples) >= 2 and samples[1][0] <= now_s - self.WINDOW_S:
            samples.popleft()

    def per_min(self, now_s: float) -> float | None:
        """The growth per minute over the last :data:`WINDOW_S` (or since the
        first sample, if later); None before a second of samples."""
        self._prune(now_s)
        if not self._samples:
            return None
        at, total = self._samples[0]
        # (before the second sample the total stayed as the first one says)
        span = min(self.WINDOW_S, now_s - at)
        if span < 1.0:
            return None
        return round((self._latest - total) * 60.0 / span, 3)


class ServedQueue:
    """One queue's loop, target and archiver, written as broker ``broker_id``.

    ``lease_ms``: the broker lease its record carries; ``observe(seconds,
    batch, state_bytes)`` is told of every commit (metrics); ``pause`` and
    ``fault_retry_s`` go to its :class:`~broker.commit.loop.CommitLoop`.
    """

    def __init__(self, name: str, store: ObjectStore, executor: Executor, *,
                 broker_id: str, url: str, lease_ms: int, settings: S.QueueSettings,
                 ownership: Ownership, clock: Callable[[], int],
                 monotonic: Callable[[], float], commit_timeout_s: float,
                 observe: Callable[[float, int, int], None], segments: SegmentStore,
                 held_in_records: bool = False, held_cache_bytes: int = 256 << 20,
                 spill: tuple[int, int, bool] = (0, 0, False),
                 pause: Pause = REAL_TIME, fault_retry_s: float = 2.0) -> None:
        self.name = name
        self.segments, self._clock, self._monotonic = segments, clock, monotonic
        self.jobs_ready = asyncio.Event()
        self.completions = RecentRate()  # jobs completed, for stats
        self.archiver = Archiver(store, name, executor, self._poke, monotonic=monotonic,
                                 segments=segments)
        self.target = QueueTarget(name, broker_id, url, lease_ms, settings, ownership,
                                  self.archiver, where=f"{store.url}/{paths.state_key(name)}",
                                  segments=segments, held_in_records=held_in_records,
                                  held_cache_bytes=held_cache_bytes, spill=spill)
        self.loop: QueueLoop = CommitLoop(
            store, paths.state_key(name), self.target, broker_id, executor,
            clock=clock,
            on_commit=lambda state, _outcomes: self.notify(state),
            on_timer=self.notify,
            observe=observe,
            commit_timeout_s=commit_timeout_s,
            fault_retry_s=fault_retry_s,
            pause=pause,
        )

    async def read(self, op: Op) -> Any:
        """The answer (``Result.view``) of the read ``op``, through the loop: it
        sees committed state only. Raises ``UnknownQueue`` for a queue that has
        no object and no job (it is created by its first push)."""
        if self.missing():
            raise UnknownQueue(f"queue {self.name!r} does not exist "
                               "(it is created by its first push)")
        return (await self.loop.submit(op)).view

    def missing(self) -> bool:
        """Whether the loop knows the queue has no object and no job: served
        here (a push that made its loop was refused, say) but never written.
        False while that is not known (the state not loaded yet, or dropped
        after a failed batch: the next commit reads it)."""
        state = self.loop.state
        return state is not None and self.loop.etag is None and not state.jobs

    def yield_to(self, state: S.QueueState) -> None:
        """Stop serving a queue this broker never wrote (:meth:`missing`) whose
        object exists now (``state``: another broker created it since): the loop
        steps down, answering what it holds ``NotTheBroker`` (retryable: nothing
        of it was written), so the queue is served, watched and taken over as
        any other broker's."""
        self.loop.step_down(self.target.not_owner(state))

    async def submit(self, op: Op | StagedPublish) -> Result:
        """Commit ``op`` and answer it (a push large enough in jobs or bytes, and
        a publish of staged chunks, go by reference: :mod:`broker.service.by_reference`)."""
        if isinstance(op, StagedPublish):
            if self.segments.push_jobs > 0:
                return await publish_by_reference(self.loop, self.segments, self.name, op,
                                                  self._clock, self._monotonic)
            chunks = await asyncio.gather(*(load() for load in op.loads))  # (in order)
            gone = sum(chunk is None for chunk in chunks)
            jobs = [job for chunk in chunks if chunk is not None for job in chunk.jobs]
            return await self.loop.submit(push_of(jobs, op.once, missing=op.missing + gone))
        if wanted(op, self.segments.push_jobs, self.segments.push_bytes,
                  self.segments.grouped):
            assert isinstance(op, Push | PushPayloads)
            return await push_by_reference(self.loop, self.segments, self.name, op,
                                           self._clock, self._monotonic)
        return await self.loop.submit(op)

    def _poke(self) -> None:
        self.loop.poke()

    def notify(self, state: S.QueueState) -> None:
        """Wake the claims waiting for jobs if ``state`` has some ready, and the
        dispatch rate limit a token (else the timer of the next one wakes them)."""
        self.completions.observe(self._monotonic(), state.counters.completed)
        spilled = bool(state.spill_refs) and has_due(state, self._clock())  # (pending spills)
        if (state.ready or state.segment_refs or spilled or (  # (groups: ready jobs, a place)
                state.groups is not None and state.groups.runnable(self._clock()))) and \
                not state.paused and state.claims.wake(state.settings, self._clock()):
            self.jobs_ready.set()
            self.jobs_ready = asyncio.Event()
