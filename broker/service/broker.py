"""The broker's own Python API (embedded mode): several named queues, each with
its own commit loop, answered only once durable.

All methods are coroutines to be awaited on the broker's event loop. The HTTP
server (:mod:`broker.http.app`) is a thin adapter over this class; so is
``osqueue_spark.start_broker``.

**Several brokers, one store.** Each queue has one owner (the broker its
object names, see :mod:`broker.service.ownership`). A broker serves the queues it
owns, creates a queue with its first push, and watches the others: when an
owner stops cleanly, dies, or stops writing for a whole lease, a watching
broker takes the queue over by itself. A write sent to a broker that does
not own the queue is answered ``NotTheBroker`` with the owner's URL. A read
(stats, jobs) never moves a queue: a broker that does not own it answers
from the stored object, and a queue that does not exist is answered 404
with nothing created; so is a claim, unless it asks to ``wait_for_queue`` (then
it returns no jobs, after waiting up to ``wait_s`` for the queue to appear).

:class:`Broker` is a thin coordinator: :mod:`broker.service.served_queue` writes (a commit
loop over :mod:`broker.service.queue_target` a served queue), :mod:`broker.service.reads`
reads, :mod:`broker.service.takeover` watches and takes over
(:mod:`broker.service.ownership`), :mod:`broker.service.staging` and
:mod:`broker.service.segment_store` keep Spark's staged writes and the segment objects.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from broker import limits, paths, timefmt
from broker.commit.offloop import run_bulk, run_io
from broker.errors import BrokerUnavailable, InvalidRequest, OsqueueError, UnknownQueue
from broker.limits import DEFAULT_LEASE_S
from broker.model import state as S
from broker.model.format import archive
from broker.model.job import DEAD, PENDING
from broker.model.ops import (
    Cancel,
    Claim,
    ClearBroker,
    Complete,
    CompleteItem,
    CompleteItems,
    Configure,
    Fail,
    FailItem,
    Heartbeat,
    LeasedJob,
    LeasedJobs,
    NewJob,
    Purge,
    Redrive,
    Release,
    Result,
    SetPaused,
    push_of,
)
from broker.model.receipts import push_digest
from broker.retry import REAL_TIME, Pause
from broker.service.by_reference import Load, StagedPublish
from broker.service.config import BrokerConfig
from broker.service.metrics import Metrics
from broker.service.ownership import WATCH_INTERVAL_S, Ownership
from broker.service.reads import Reads
from broker.service.segment_store import SegmentStore
from broker.service.served_queue import ServedQueue
from broker.service.staging import Staging
from broker.service.startup import start_up
from broker.service.takeover import Takeover
from broker.storage import ObjectStore
from broker.wire import CancelAnswer, ItemResult

log = logging.getLogger("osqueue.broker")

class Broker:
    """Owns the queues of one store. Create it, ``await start()``, then call ops.

    ``clock`` (wall ms) and ``monotonic`` (s) are the broker's clocks; ``pause``
    is what start-up's and the commit loops' retries wait on and count their
    deadlines on, ``fault_retry_s`` how soon a queue whose last batch failed
    re-reads its object on its own: real time and 2 s unless a test injects them.
    """

    def __init__(self, store: ObjectStore, config: BrokerConfig | None = None, *,
                 clock: Callable[[], int] = timefmt.now_ms,
                 monotonic: Callable[[], float] = time.monotonic,
                 pause: Pause = REAL_TIME, fault_retry_s: float = 2.0) -> None:
        self.store = store
        self._pause, self._fault_retry_s = pause, fault_retry_s
        self.config = config or BrokerConfig()
        self.id = self.config.broker_id
        self.clock = clock
        self.monotonic = monotonic
        self.metrics = Metrics()
        self.ownership = Ownership(self.id, self.config.url, monotonic=monotonic)
        self._queues: dict[str, ServedQueue] = {}  # queues with a loop (active or not)
        self._locks: dict[str, asyncio.Lock] = {}
        self._created = asyncio.Event()  # pulsed when this broker creates a queue
        self._executor = ThreadPoolExecutor(self.config.io_threads, thread_name_prefix="osq-io")
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        try:
            self._settings = S.QueueSettings.from_dict(self.config.default_settings)
        except ValueError as exc:
            raise InvalidRequest(f"bad default queue setting: {exc}") from None
        unknown = set(self.config.default_settings) - set(limits.SETTING_LIMITS)
        if unknown:
            raise InvalidRequest(f"unknown queue settings {sorted(unknown)}; "
                                 f"known: {sorted(limits.SETTING_LIMITS)}")
        self.takeover = Takeover(self, store, self.ownership, io=self._io, monotonic=monotonic)
        self.staging = Staging(store, self._io, self._bulk,
                               cache_bytes=self.config.staged_cache_bytes,
                               max_payload_bytes=self._settings.max_payload_bytes,
                               monotonic=monotonic)
        self.segments = SegmentStore(store, self._io, self._bulk, monotonic=monotonic, grace_s=(
            self.config.segment_grace_s), push_jobs=self.config.segment_push_jobs,
            push_bytes=self.config.segment_push_bytes, grouped=self.config.grouped_segments)
        self.reads = Reads(store, self.served, self.segments, self._io, self._bulk,
                           clock=clock, monotonic=monotonic)

    @property
    def url(self) -> str:
        return self.config.url

    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await run_io(self._executor, fn, *args)

    async def _bulk(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await run_bulk(self._executor, fn, *args)

    store_call = _io  # a store call on the I/O threads, for the dashboard's sign-outs

    # -- lifecycle ----------------------------------------------------------------
    async def start(self) -> None:
        """Check the store, load every existing queue, take over those no live
        broker owns and watch the rest.

        Rides out transient storage errors for ``startup_timeout_s``, then raises
        the last one; raises ``StorageRefused``, ``UnsafeStore`` (the self-test)
        or a ``StateError`` (naming the object) at once. Nothing is written until
        every object has loaded (see :mod:`broker.service.startup`).
        """
        served, existing = await start_up(self.store, self.takeover, self._io,
                                          self_test=self.config.self_test,
                                          timeout_s=self.config.startup_timeout_s,
                                          pause=self._pause)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.config.sweep_s, self.sweep_staging, "staging sweep")),
            loop.create_task(self._every(WATCH_INTERVAL_S, self.watch, "watch")),
        ]
        log.info("broker %s serving %d of %d queue(s) from %s at %s", self.id, served,
                 existing, self.store.url, self.url or "(in-process)")

    async def stop(self, drain_s: float = 30.0) -> None:
        """Flush buffered operations, write pending archive objects, clear our
        broker record, stop every loop; all within ``drain_s`` (storage down or
        not: callers still waiting then get ``BrokerUnavailable``). Cancelled, it
        ends where it is, whatever answered in that same turn: the loops it had
        not closed yet are stopped at once (:meth:`broker.commit.loop.CommitLoop.abort`: their
        buffers answered ``BrokerUnavailable``, never written); the rest of its
        work (the broker record, the store's clean-up) is left undone."""
        if self._stopping:
            return
        self._stopping = True
        deadline = self.monotonic() + drain_s

        def left() -> float:
            return max(0.05, deadline - self.monotonic())

        for task in self._tasks:
            task.cancel()

        async def retire(q: ServedQueue) -> None:
            q.target.retiring = True
            if q.loop.active and q.loop.etag is not None:
                await q.archiver.wait(left() / 2)
                # Not wait_for: on Python 3.11 it swallows a cancellation coming
                # with the answer.
                try:
                    async with asyncio.timeout(left()):
                        await q.loop.submit(ClearBroker(self.id))
                except (OsqueueError, TimeoutError) as exc:
                    log.warning("could not clear broker record of %s: %s", q.name, exc)
            q.archiver.cancel()
            await q.loop.close(left())

        queues = list(self._queues.values())
        try:
            await asyncio.gather(*(retire(q) for q in queues))
        except asyncio.CancelledError:
            # (stop() cancelled, before or while its retire tasks ran: its loops must
            # not live on as zombies, committing beside a successor; their buffers are
            # answered, never written; abort() of a loop already ended is a no-op)
            for q in queues:
                q.archiver.cancel()
                q.loop.abort()
            raise
        try:
            async with asyncio.timeout(left()):
                await self._io(self.store.settle)
        except TimeoutError:
            log.warning("store clean-up did not finish within the drain time")
        self._executor.shutdown(wait=False)
        log.info("broker %s stopped", self.id)

    # -- queues: who serves what ----------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stopping

    def served(self, name: str) -> ServedQueue | None:
        """The queue if this broker serves it now (its loop is active)."""
        q = self._queues.get(name)
        return q if q is not None and q.loop.active else None

    def lock(self, name: str) -> asyncio.Lock:
        """The lock held while deciding who serves ``name``."""
        return self._locks.setdefault(name, asyncio.Lock())

    def forget_queue(self, name: str) -> None:
        del self._queues[name]

    def make_queue(self, name: str) -> ServedQueue:
        """The queue's loop and archiver: the one there is, or a new one (one a queue)."""
        if (existing := self._queues.get(name)) is not None:
            return existing

        def observe(seconds: float, batch: int, state_bytes: int) -> None:
            self.metrics.commit(seconds, batch)
            self.metrics.gauge("osqueue_state_bytes", state_bytes, queue=name)

        q = ServedQueue(name, self.store, self._executor, broker_id=self.id, url=self.url,
                        lease_ms=round(self.config.lease_s * 1000), settings=self._settings,
                        ownership=self.ownership, clock=self.clock, monotonic=self.monotonic,
                        commit_timeout_s=self.config.commit_timeout_s, observe=observe,
                        segments=self.segments, held_in_records=self.config.held_in_records,
                        held_cache_bytes=self.config.held_cache_mb << 20,
                        spill=(self.config.spill_jobs, self.config.spill_bytes,
                               self.config.spill_pending),
                        pause=self._pause, fault_retry_s=self._fault_retry_s)
        self._queues[name] = q
        return q

    async def read_object(self, name: str) -> tuple[S.QueueState, str] | None:
        """The stored state of ``name`` and its etag, or None if it does not exist
        (:meth:`Reads.read_object <broker.service.reads.Reads.read_object>`)."""
        return await self.reads.read_object(name)

    async def _serving(self, name: str, *, create: bool) -> ServedQueue:
        """The queue's loop if this broker serves it, taking it over if no live
        broker owns it, or creating it if ``create`` and it does not exist.

        Raises ``NotTheBroker`` (with the owner's URL) if a live broker owns
        it, ``UnknownQueue`` if it does not exist and ``create`` is false.
        """
        q = self.served(name)
        if q is not None and (create or not q.missing()):
            return q
        paths.check_queue_name(name)
        if self._stopping:
            raise BrokerUnavailable("broker is shutting down")
        async with self.lock(name):
            q = self.served(name)
            if q is not None and (create or not q.missing()):
                return q
            if q is not None:  # never written here: another broker may have created it
                got = await self.read_object(name)
                if got is None:
                    raise UnknownQueue(f"queue {name!r} does not exist "
                                       "(it is created by its first push)")
                q.yield_to(got[0])
            exists = await self.takeover.admit(name)  # raises NotTheBroker
            if not exists and not create:
                raise UnknownQueue(f"queue {name!r} does not exist "
                                   "(it is created by its first push)")
            if self._stopping:  # (stop() began meanwhile: it retires the queues it listed)
                raise BrokerUnavailable("broker is shutting down")
            # (the watch never makes a queue outside this lock)
            q = self.make_queue(name)
            q.loop.reactivate()
            q.loop.start()
            self.takeover.known.add(name)
            if not exists:
                self._created.set()
                self._created = asyncio.Event()
            return q

    async def watch(self) -> None:
        """One round of watching the queues this broker does not serve (see
        :meth:`broker.service.takeover.Takeover.watch`)."""
        await self.takeover.watch()

    async def _submit(self, queue: str, opname: str, op: Any, *, create: bool = False) -> Any:
        q = await self._serving(queue, create=create)
        try:
            result = await q.submit(op)
        except OsqueueError as exc:
            self.metrics.op(queue, opname, exc.code)
            raise
        self.metrics.op(queue, opname, "ok")
        return result

    async def create_queue(self, name: str,
                           settings: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create a queue (or change its settings) and write it now."""
        await self._submit(name, "configure", Configure(dict(settings or {})),
                           create=True)
        return await self.stats(name)

    # -- operations -------------------------------------------------------------------
    async def push(self, queue: str, jobs: Sequence[NewJob | bytes],
                   request: str | None = None, floor: int | None = None) -> list[str]:
        """Enqueue ``jobs`` (bare bytes: a payload's JSON with default options) in one
        commit; return their ids in order. ``request``: the caller's key for this
        call, making a repeat of it answer the same ids and create nothing (and
        a push of other jobs under it raise ``RequestKeyReused``: its receipt
        keeps their digest); ``floor``: see :mod:`broker.model.receipts`."""
        if not jobs:
            raise InvalidRequest("push needs at least one job")
        op = push_of(jobs, request=request, floor=floor,
                     digest=None if request is None else push_digest(jobs))
        result = await self._submit(queue, "push", op, create=True)
        return list(result.ids)

    # -- staged writes (Spark's exactly-once enqueue: see broker.service.staging) ----------
    async def stage(self, queue: str, write_id: str, lines: bytes) -> int:
        """Store staged lines as one staging object; how many jobs they hold (see
        :meth:`broker.service.staging.Staging.stage`). Any broker stages: no ownership."""
        return await self.staging.stage(queue, write_id, lines)

    async def publish(self, queue: str, prefix: str, keep: list[str],
                      once: str | None = None) -> dict[str, Any]:
        """Push the staged chunks ``keep`` in one commit; drop every staging object
        under ``prefix``.

        With ``once``, the publish happens at most once: a repeat (a retry after
        a timeout, a replayed Spark commit) answers ``duplicate: true`` even if
        the first one already removed the staging objects. Raises
        ``InvalidRequest`` (publishing and removing nothing) if a chunk to keep
        is missing and the publish did not happen before, or a name is bad.
        """
        paths.check_publish(queue, prefix, keep)  # before anything touches the store
        if keep:
            await self._serving(queue, create=True)  # the owner publishes; others redirect

        async def commit(loads: list[Load], missing: int) -> Result:
            result: Result = await self._submit(
                queue, "publish", StagedPublish(tuple(loads), missing, once), create=True)
            return result

        return await self.staging.publish(queue, prefix, keep, once, commit)

    async def sweep_staging(self) -> int:
        """Sweep the queues served here: staging objects (:meth:`Staging.sweep`: returns
        how many), then segment objects (:meth:`SegmentStore.sweep_served`)."""
        served = [(n, q.loop.state) for n, q in list(self._queues.items()) if q.loop.active]
        removed = await self.staging.sweep(
            (name, (st.settings if st else self._settings).staged_ttl_s) for name, st in served)
        await self.segments.sweep_served(served)
        return removed

    async def _every(self, every_s: float, work: Callable[[], Awaitable[Any]],
                     what: str) -> None:
        """Run ``work`` every ``every_s`` seconds until the broker stops; log its errors."""
        while not self._stopping:
            await asyncio.sleep(every_s)
            try:
                await work()
            except OsqueueError as exc:
                log.warning("%s failed: %s", what, exc)
            except Exception:  # a periodic task must outlive any one failure
                log.exception("%s failed", what)

    async def claim(self, queue: str, worker: str, max_jobs: int = 1,
                    lease_s: float = DEFAULT_LEASE_S, wait_s: float = 0.0,
                    request: str | None = None, floor: int | None = None,
                    gone: asyncio.Future[Any] | None = None,
                    wait_for_queue: bool = False) -> Sequence[LeasedJob]:
        """Claim up to ``max_jobs``, waiting up to ``wait_s`` for one. ``request``: the
        caller's key (a repeat answers the jobs still held under the first's leases);
        ``gone``: done once the caller left (the wait ends; jobs claimed go back with
        :meth:`release`). A missing queue: ``UnknownQueue``, unless ``wait_for_queue``."""
        if wait_s < 0 or wait_s > self.config.max_wait_s:
            raise InvalidRequest(f"wait_s must be within [0, {self.config.max_wait_s}]")
        op = Claim(worker, max_jobs, round(lease_s * 1000), request, floor)
        paths.check_queue_name(queue)
        deadline = self.monotonic() + wait_s
        while True:
            q = self._queues.get(queue)
            # taken before the claim, so no wake-up is missed
            ready = q.jobs_ready if q is not None and q.loop.active else None
            created = self._created
            try:
                result = await self._submit(queue, "claim", op)
            except UnknownQueue as exc:
                if not wait_for_queue:
                    raise UnknownQueue(f"{exc.message}; wait_for_queue waits for it") from None
                result = Result()
            jobs = result.jobs  # (column-wise from a claim: see broker.model.columns)
            remaining = deadline - self.monotonic()
            if jobs or result.replayed or remaining <= 0 or self._stopping or (
                    gone is not None and gone.done()):
                return jobs
            if ready is None:
                q = self._queues.get(queue)
                if q is not None and q.loop.active:
                    continue  # served here since: claim again with its event
                ready = created
            woken = asyncio.ensure_future(ready.wait())
            try:
                await asyncio.wait((woken,) if gone is None else (woken, gone),
                                   timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()
            if gone is not None and gone.done():
                return LeasedJobs()  # (even if a job came as it left: it is not claimed)

    async def release(self, queue: str, tokens: Sequence[str], request: str | None = None) -> int:
        """Hand back the jobs of a claim (key ``request``) whose caller left unanswered
        (:class:`broker.model.ops.Release`); how many. Raises what the commit raised."""
        return int((await self._submit(queue, "release", Release(tuple(tokens), request))).count)

    async def heartbeat(self, queue: str, tokens: list[str],
                        lease_s: float = DEFAULT_LEASE_S) -> Sequence[ItemResult]:
        result = await self._submit(
            queue, "heartbeat", Heartbeat(tuple(tokens), round(lease_s * 1000)))
        return result.items

    async def complete(self, queue: str, items: Sequence[CompleteItem]
                       ) -> Sequence[ItemResult]:
        """Complete each item's job with its result; one answer per item, in order.
        ``items``: CompleteItems (column-wise, as the HTTP layer parses them) or
        any sequence of CompleteItem."""
        # a copy, as of now: the op waits for the group commit, and the caller's
        # object may change meanwhile (two list copies, not an object per item)
        items = CompleteItems(*map(list, items.columns)) \
            if isinstance(items, CompleteItems) else tuple(items)
        result = await self._submit(queue, "complete", Complete(items))
        return result.items

    async def fail(self, queue: str, items: Sequence[FailItem]) -> Sequence[ItemResult]:
        result = await self._submit(queue, "fail", Fail(tuple(items)))
        return result.items

    async def redrive(self, queue: str, ids: list[str] | None = None,
                      request: str | None = None, floor: int | None = None) -> int:
        """Return dead jobs (``ids``, or all) to pending; how many. ``request``: a
        repeat answers the first count and returns nothing more."""
        op = Redrive(tuple(ids) if ids is not None else None, request, floor)
        await self._existing(queue)
        return int((await self._submit(queue, "redrive", op)).count)

    async def purge(self, queue: str, statuses: list[str] | None = None,
                    request: str | None = None, floor: int | None = None) -> int:
        """Delete jobs by status; how many. ``request``: a repeat answers the first
        count and deletes nothing more (not the jobs pushed since)."""
        op = Purge(tuple(statuses) if statuses else (PENDING, DEAD), request, floor)
        await self._existing(queue)
        return int((await self._submit(queue, "purge", op)).count)

    async def cancel(self, queue: str, ids: Sequence[str]) -> list[CancelAnswer]:
        """Cancel the jobs ``ids`` in one commit; one answer per id, in order,
        once durable (see :mod:`broker.model.cancels`: a pending or delayed job
        is cancelled, a claimed one marked, an unknown or finished one left as
        it is). Raises ``InvalidRequest`` for no ids or more than ``MAX_ITEMS``,
        ``UnknownQueue`` for a queue with no object, and what the commit raised."""
        if not 0 < len(ids) <= limits.MAX_ITEMS:
            raise InvalidRequest(f"cancel needs 1..{limits.MAX_ITEMS} job ids, got {len(ids)}")
        await self._existing(queue)
        result = await self._submit(queue, "cancel", Cancel(tuple(ids)))
        return list(result.view)

    async def _existing(self, queue: str) -> None:
        """Raise ``UnknownQueue`` if the queue has no object (a keyed admin call makes none)."""
        q = await self._serving(queue, create=False)
        if q.loop.etag is None and await self.read_object(queue) is None:
            raise UnknownQueue(f"queue {queue!r} does not exist (it is created by its first push)")

    async def set_paused(self, queue: str, paused: bool) -> None:
        await self._submit(queue, "pause" if paused else "resume", SetPaused(paused))

    # -- reads (broker.service.reads: a read never moves a queue) ---------------------------
    async def jobs(self, queue: str, status: str | None = None, limit: int = 100,
                   after: str | None = None, *, raw: bool = False,
                   tokens: bool = False) -> list[dict[str, Any]]:
        """A page of jobs as plain dicts (:meth:`Reads.jobs <broker.service.reads.Reads.jobs>`)."""
        return await self.reads.jobs(queue, status, limit, after, raw=raw, tokens=tokens)

    async def stats(self, queue: str) -> dict[str, Any]:
        """Counts and figures of ``queue``, and this broker's if it serves it
        (:meth:`Reads.stats <broker.service.reads.Reads.stats>`)."""
        return await self.reads.stats(queue)

    async def job(self, queue: str, job_id: str) -> dict[str, Any]:
        """Job ``job_id`` of ``queue``, wherever it is
        (:meth:`Reads.job <broker.service.reads.Reads.job>`)."""
        return await self.reads.job(queue, job_id)

    async def archived(self, queue: str, job_id: str) -> archive.Found | None:
        """Job ``job_id`` in the archive of ``queue``, or None
        (:meth:`Reads.archived <broker.service.reads.Reads.archived>`)."""
        return await self.reads.archived(queue, job_id)

    def queue_names(self) -> list[str]:
        return sorted(self.takeover.known | set(self._queues))

    def health(self) -> dict[str, Any]:
        """The broker's condition and each queue's: served here (and whether its
        last batch failed, and why) or watched."""
        queues: dict[str, Any] = {}
        for name in sorted(self.takeover.known | set(self._queues)):
            q = self._queues.get(name)
            if q is None or not q.loop.active:
                queues[name] = {"role": "standby"}
                continue
            queues[name] = {"role": "owner", "fault": q.loop.fault,
                            "archive_writes_pending": q.archiver.pending(),
                            "archive_error": q.archiver.last_error}
        faulted = [n for n, info in queues.items() if info.get("fault")]
        return {"ok": not faulted and not self._stopping, "broker": self.id, "url": self.url,
                "stopping": self._stopping, "faulted_queues": faulted, "queues": queues}

    def refresh_gauges(self) -> None:
        for name, q in self._queues.items():
            state = q.loop.state if q.loop.active else None
            self.metrics.queue_gauges(name, q.loop.stats, q.loop.active, state, self.clock())
