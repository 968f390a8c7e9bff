"""The broker's own Python API (embedded mode): several named queues, each with
its own commit loop, answered only once durable.

All methods are coroutines to be awaited on the broker's event loop. The HTTP
server (:mod:`broker.http`) is a thin adapter over this class; so is
``osqueue_spark.start_broker``.

**Several brokers, one store.** Each queue has one owner (the broker its
object names, see :mod:`broker.ownership`). A broker serves the queues it
owns, creates a queue with its first push, and watches the others: when an
owner stops cleanly, dies, or stops writing for a whole lease, a watching
broker takes the queue over by itself. A write sent to a broker that does
not own the queue is answered ``NotTheBroker`` with the owner's URL. A read
(stats, jobs) never moves a queue: a broker that does not own it answers
from the stored object, and a queue that does not exist is answered 404
with nothing created. A claim on a queue that does not exist returns no jobs
(after waiting up to ``wait_s`` for it to appear) and creates nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from broker import api, codec, keys, limits, timefmt, transitions
from broker import state as S
from broker.archiver import Archiver
from broker.commit import CommitLoop
from broker.errors import (
    BrokerUnavailable,
    InvalidRequest,
    NotFound,
    NotTheBroker,
    OsqueueError,
    UnknownQueue,
)
from broker.gcpause import gc_paused
from broker.metrics import Metrics
from broker.ownership import WATCH_INTERVAL_S, Ownership, new_broker_id
from broker.queue_model import QueueModel
from broker.staged_cache import StagedCache
from broker.storage import ObjectStore

log = logging.getLogger("osqueue.broker")

#: How often a broker lists the store for queues it does not know yet (s).
RELIST_S = 10.0
#: How often staging objects of vanished Spark writers are swept (s).
SWEEP_S = 60.0


@dataclass
class BrokerConfig:
    """Broker settings. Times in seconds, sizes in bytes."""

    url: str = ""
    broker_id: str = field(default_factory=new_broker_id)
    lease_s: float = 30.0
    max_wait_s: float = 60.0
    max_request_bytes: int = 64 * 1024 * 1024
    io_threads: int = 16
    staged_cache_bytes: int = 256 * 1024 * 1024  # staged chunks kept parsed until publish
    self_test: bool = True
    commit_timeout_s: float = 30.0  # a batch waits this long on failing storage at most
    default_settings: dict[str, Any] = field(default_factory=dict)


class _Queue:
    """One served queue: its loop, its archiver, and the event that wakes long polls."""

    def __init__(self, name: str, loop: CommitLoop[S.QueueState], model: QueueModel,
                 archiver: Archiver) -> None:
        self.name = name
        self.loop = loop
        self.model = model
        self.archiver = archiver
        self.jobs_ready = asyncio.Event()

    def notify(self, state: S.QueueState) -> None:
        if state.ready and not state.paused:
            self.jobs_ready.set()
            self.jobs_ready = asyncio.Event()


class Broker:
    """Owns the queues of one store. Create it, ``await start()``, then call ops."""

    def __init__(self, store: ObjectStore, config: BrokerConfig | None = None, *,
                 clock: Callable[[], int] = timefmt.now_ms,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.config = config or BrokerConfig()
        self.id = self.config.broker_id
        self.clock = clock
        self.monotonic = monotonic
        self.metrics = Metrics()
        self.ownership = Ownership(self.id, self.config.url, monotonic=monotonic)
        self._queues: dict[str, _Queue] = {}
        self._known: set[str] = set()  # queues in the store, served or watched
        self._lease_s: dict[str, float] = {}  # watched queue -> its owner's lease (s)
        self._locks: dict[str, asyncio.Lock] = {}
        self._created = asyncio.Event()  # pulsed when this broker creates a queue
        self._executor = ThreadPoolExecutor(self.config.io_threads, thread_name_prefix="osq-io")
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._listed_at = 0.0
        self._staging_seen: dict[str, float] = {}  # staging key -> first listed (monotonic)
        try:
            self._settings = S.Settings.from_dict(self.config.default_settings)
        except ValueError as exc:
            raise InvalidRequest(f"bad default queue setting: {exc}") from None
        unknown = set(self.config.default_settings) - set(limits.SETTING_LIMITS)
        if unknown:
            raise InvalidRequest(f"unknown queue settings {sorted(unknown)}; "
                                 f"known: {sorted(limits.SETTING_LIMITS)}")
        self._staged = StagedCache(self.config.staged_cache_bytes)

    @property
    def url(self) -> str:
        return self.config.url

    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- lifecycle ----------------------------------------------------------------
    async def start(self) -> None:
        """Check the store, load every existing queue, take over those no live
        broker owns and watch the rest.

        Raises ``UnsafeStore`` if the store ignores conditional writes and a
        ``StateError`` (naming the object) if any queue object is corrupt,
        foreign or newer; nothing is written in either case.
        """
        if self.config.self_test:
            await self._io(self.store.self_test)
        names = await self._io(self._existing_queue_names)
        self._listed_at = self.monotonic()
        mine = []
        for name in names:
            q = self._make_queue(name)
            state = await q.loop.load()  # raises StateError before anything is written
            self._known.add(name)
            self._note_record(name, q.loop.etag, state.broker)
            if self.ownership.may_take(name, state.broker):
                mine.append(q)
            else:
                del self._queues[name]  # watched, not served: no loop
        # Take them over (write our record, re-lease claimed jobs) before saying
        # we are ready; a queue another broker wins meanwhile is watched instead.
        await asyncio.gather(*(self._take_over(q) for q in mine))
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(SWEEP_S, self.sweep_staging, "staging sweep")),
            loop.create_task(self._every(WATCH_INTERVAL_S, self.watch, "watch")),
        ]
        log.info("broker %s serving %d of %d queue(s) from %s at %s", self.id,
                 sum(q.loop.active for q in self._queues.values()), len(names),
                 self.store.url, self.url or "(in-process)")

    def _existing_queue_names(self) -> list[str]:
        names = []
        for key in self.store.list(""):
            name = keys.queue_from_state_key(key)
            if name is not None:
                names.append(name)
        return names

    async def stop(self, drain_s: float = 30.0) -> None:
        """Flush buffered operations, write pending archive objects, clear our
        broker record, stop every loop; all within ``drain_s`` (storage down or
        not: callers still waiting then get ``BrokerUnavailable``)."""
        if self._stopping:
            return
        self._stopping = True
        deadline = self.monotonic() + drain_s

        def left() -> float:
            return max(0.05, deadline - self.monotonic())

        for task in self._tasks:
            task.cancel()

        async def retire(q: _Queue) -> None:
            q.model.retiring = True
            if q.loop.active and q.loop.etag is not None:
                await q.archiver.wait(left() / 2)
                try:
                    await asyncio.wait_for(q.loop.submit(transitions.ClearBroker(self.id)),
                                           left())
                except (OsqueueError, TimeoutError) as exc:
                    log.warning("could not clear broker record of %s: %s", q.name, exc)
            q.archiver.cancel()
            await q.loop.close(left())

        await asyncio.gather(*(retire(q) for q in list(self._queues.values())))
        try:
            await asyncio.wait_for(self._io(self.store.settle), left())
        except TimeoutError:
            log.warning("store clean-up did not finish within the drain time")
        self._executor.shutdown(wait=False)
        log.info("broker %s stopped", self.id)

    # -- queues: who serves what ----------------------------------------------------
    def _make_queue(self, name: str) -> _Queue:
        """The queue's loop and archiver: the one there is, or a new one (one a queue)."""
        existing = self._queues.get(name)
        if existing is not None:
            return existing
        holder: list[_Queue] = []
        archiver = Archiver(self.store, name, self._executor,
                            lambda: holder[0].loop.poke(), monotonic=self.monotonic)
        model = QueueModel(name, self.id, self.url, round(self.config.lease_s * 1000),
                           self._settings, self.ownership, archiver,
                           where=f"{self.store.url}/{keys.state_key(name)}")

        def observe(seconds: float, batch: int, state_bytes: int) -> None:
            self.metrics.commit(seconds, batch)
            self.metrics.gauge("osqueue_state_bytes", state_bytes, queue=name)

        loop: CommitLoop[S.QueueState] = CommitLoop(
            self.store, keys.state_key(name), model, self.id, self._executor,
            clock=self.clock,
            on_commit=lambda st, _results: holder[0].notify(st),
            on_timer=lambda st: holder[0].notify(st),
            observe=observe,
            commit_timeout_s=self.config.commit_timeout_s,
        )
        q = _Queue(name, loop, model, archiver)
        holder.append(q)
        self._queues[name] = q
        return q

    def _note_record(self, name: str, etag: str | None, record: S.BrokerRecord | None) -> None:
        self.ownership.observe(name, etag=etag, record=record)
        if record is not None:
            self._lease_s[name] = record.lease_ms / 1000

    async def _take_over(self, q: _Queue) -> bool:
        """Make ``q`` ours (a commit that writes our record); False if another
        broker turned out to own it."""
        if not q.loop.active:
            q.loop.reactivate()
        q.loop.start()
        self._known.add(q.name)
        try:
            await q.loop.submit(transitions.Reclaim())  # housekeeping carries the takeover
        except NotTheBroker as exc:
            log.info("queue %s: %s; watching it", q.name, exc)
            return False
        except OsqueueError as exc:
            log.warning("queue %s: taking it over failed for now (%s)", q.name, exc)
            return False
        self.ownership.forget(q.name)
        log.info("queue %s: this broker serves it now", q.name)
        return True

    async def _read_object(self, name: str) -> tuple[S.QueueState, str] | None:
        """The stored state of ``name`` and its etag, or None if it does not exist."""
        try:
            got = await self._io(self.store.read, keys.state_key(name))
        except NotFound:
            return None
        with gc_paused():
            state = codec.decode(got.data, where=f"{self.store.url}/{keys.state_key(name)}")
        return state, got.etag

    async def _serving(self, name: str, *, create: bool) -> _Queue:
        """The queue's loop if this broker serves it, taking it over if no live
        broker owns it, or creating it if ``create`` and it does not exist.

        Raises ``NotTheBroker`` (with the owner's URL) if a live broker owns
        it, ``UnknownQueue`` if it does not exist and ``create`` is false.
        """
        q = self._queues.get(name)
        if q is not None and q.loop.active:
            return q
        keys.check_queue_name(name)
        if self._stopping:
            raise BrokerUnavailable("broker is shutting down")
        async with self._locks.setdefault(name, asyncio.Lock()):
            q = self._queues.get(name)
            if q is not None and q.loop.active:
                return q
            got = await self._read_object(name)
            q = self._queues.get(name)  # (the watch never makes one outside this lock)
            if got is None:
                if not create:
                    raise UnknownQueue(f"queue {name!r} does not exist "
                                       "(it is created by its first push)")
            else:
                state, etag = got
                self._note_record(name, etag, state.broker)
                if not self.ownership.may_take(name, state.broker):
                    self._known.add(name)
                    assert state.broker is not None
                    raise NotTheBroker(f"this broker does not serve queue {name!r}; "
                                       f"it is served by {state.broker.url}",
                                       url=state.broker.url, queue=name)
            q = q or self._make_queue(name)
            q.loop.reactivate()
            q.loop.start()
            self._known.add(name)
            if got is None:
                self._created.set()
                self._created = asyncio.Event()
            return q

    async def watch(self) -> None:
        """One round of watching the queues this broker does not serve: a cheap
        ``head`` each; take over those whose owner is gone (see
        :mod:`broker.ownership`)."""
        if self._stopping:
            return
        if self.monotonic() - self._listed_at >= RELIST_S:
            self._known.update(await self._io(self._existing_queue_names))
            self._listed_at = self.monotonic()
        for name in sorted(self._known):
            q = self._queues.get(name)
            if self._stopping or (q is not None and q.loop.active):
                continue
            try:
                etag = await self._io(self.store.head, keys.state_key(name))
            except NotFound:
                self._known.discard(name)
                self.ownership.forget(name)
                continue
            except OsqueueError as exc:
                log.debug("watch of %s failed: %s", name, exc)
                continue
            self.ownership.observe(name, etag=etag)
            lease_s = self._lease_s.get(name)
            log.debug("watch %s: etag %s, quiet for %.1fs (lease %s)", name, etag[-8:],
                      self.ownership.quiet_for(name), lease_s)
            if lease_s is not None and self.ownership.quiet_for(name) < lease_s:
                continue  # the owner wrote within its lease: alive
            async with self._locks.setdefault(name, asyncio.Lock()):
                q = self._queues.get(name)
                if self._stopping or (q is not None and q.loop.active):
                    continue  # a request made it ours meanwhile
                try:
                    got = await self._read_object(name)
                except OsqueueError as exc:
                    log.warning("watch of %s: cannot read it (%s)", name, exc)
                    continue
                if got is None:
                    continue
                state, etag = got
                self._note_record(name, etag, state.broker)
                if not self.ownership.may_take(name, state.broker):
                    continue
                log.warning("queue %s: its broker %s is gone; taking it over", name,
                            state.broker.id if state.broker else "(none)")
                q = self._make_queue(name)
                q.loop.reactivate()
                q.loop.start()
            await self._take_over(q)

    async def _submit(self, queue: str, opname: str, op: Any, *, create: bool = False) -> Any:
        q = await self._serving(queue, create=create)
        try:
            result = await q.loop.submit(op)
        except OsqueueError as exc:
            self.metrics.op(queue, opname, exc.code)
            raise
        self.metrics.op(queue, opname, "ok")
        return result

    async def create_queue(self, name: str,
                           settings: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create a queue (or change its settings) and write it now."""
        await self._submit(name, "configure", transitions.Configure(dict(settings or {})),
                           create=True)
        return await self.stats(name)

    # -- operations -------------------------------------------------------------------
    async def push(self, queue: str, jobs: Sequence[transitions.NewJob | bytes],
                   request: str | None = None, floor: int | None = None) -> list[str]:
        """Enqueue ``jobs`` (bare bytes: a payload's JSON with default options) in one
        commit; return their ids in order. ``request``: the caller's key for this
        call, making a repeat of it answer the same ids and create nothing;
        ``floor``: see :mod:`broker.receipts`."""
        if not jobs:
            raise InvalidRequest("push needs at least one job")
        op = transitions.push_of(jobs, request=request, floor=floor)
        result = await self._submit(queue, "push", op, create=True)
        if result.error is not None:  # a refusal, remembered and written
            raise result.error
        return list(result.ids)

    # -- staged writes (Spark's exactly-once enqueue) ---------------------------------
    #
    # A task stages a chunk of jobs as its own immutable object (no CAS, no
    # commit: staging costs nothing in the queue object). The driver's publish
    # reads the chunks of the successful attempts and pushes them in ONE commit,
    # marked with a "once" key so a repeated publish adds nothing; then every
    # staging object of the write is deleted. Objects of a writer that vanished
    # are swept once this broker has seen them for the queue's staged_ttl_s.

    async def stage(self, queue: str, write_id: str, lines: bytes) -> int:
        """Store staged lines (see :mod:`broker.api`) as one staging object; return
        how many jobs they hold. Staging a write id again replaces what it held
        (one object a write id: the last put wins). Raises ``InvalidRequest`` or
        ``PayloadTooLarge`` (storing nothing) if any line is bad."""
        keys.check_queue_name(queue)
        keys.check_write_id(write_id)
        key = keys.staging_key(queue, write_id)
        count = await self._io(self._check_and_put, key, lines)
        return int(count)

    def _check_and_put(self, key: str, lines: bytes) -> int:
        jobs = api.parse_staged(lines, check=True,
                                max_payload_bytes=self._settings.max_payload_bytes)
        if not jobs:
            raise InvalidRequest("nothing to stage: no job lines")
        etag = self.store.put(key, lines)
        self._staged.put(key, jobs, len(lines), etag)
        return len(jobs)

    def _staged_objects(self, queue: str, prefix: str) -> tuple[dict[str, str], list[str]]:
        """(write id -> its staging object, every staging object) under ``prefix``."""
        found: dict[str, str] = {}
        every = []
        for key in self.store.list(keys.staging_prefix(queue) + prefix):
            write_id = keys.parse_staging_key(queue, key)
            if write_id is None:
                continue
            every.append(key)
            if write_id not in found or key == keys.staging_key(queue, write_id):
                found[write_id] = key  # (this version's key over an 0.1 one)
        return found, every

    def _read_staged(self, key: str) -> list[transitions.NewJob | bytes] | None:
        """The jobs of a staging object, or None if it is gone (published meanwhile)."""
        cached = self._staged.pop(key)
        try:
            if cached is not None and self.store.head(key) == cached[1]:
                return cached[0]  # still the version this broker staged
            data = self.store.get(key)
        except NotFound:
            return None
        with gc_paused():
            return api.parse_staged(data, check=False, where=key)

    async def publish(self, queue: str, prefix: str, keep: list[str],
                      once: str | None = None) -> dict[str, Any]:
        """Push the staged chunks ``keep`` in one commit; drop every staging object
        under ``prefix``.

        With ``once``, the publish happens at most once: a repeat (a retry after
        a timeout, a replayed Spark commit) answers ``duplicate: true`` even if
        the first one already removed the staging objects. Raises
        ``InvalidRequest`` (publishing and removing nothing) if a chunk to keep
        is missing and the publish did not happen before.
        """
        keys.check_queue_name(queue)
        if keep:
            await self._serving(queue, create=True)  # the owner publishes; others redirect
        newest, every = await self._io(self._staged_objects, queue, prefix)
        result = None
        if keep:
            missing = [w for w in keep if w not in newest]
            if missing and once is None:
                raise InvalidRequest(f"{len(missing)} staged chunk(s) are missing, e.g. "
                                     f"{missing[0]!r}; nothing was published")
            chunks = await asyncio.gather(*(self._io(self._read_staged, newest[w])
                                            for w in keep if w in newest))
            gone = len(missing) + sum(c is None for c in chunks)
            jobs = [job for chunk in chunks if chunk is not None for job in chunk]
            result = await self._submit(queue, "publish",
                                        transitions.push_of(jobs, once, missing=gone),
                                        create=True)
            if result.error is not None:
                raise result.error
        try:
            await self._io(self._delete_staged, every)
        except OsqueueError as exc:  # published all the same; the sweep removes them later
            log.warning("publish of %s%s: staging objects not removed yet (%s)",
                        queue, prefix, exc)
        published = len(result.ids) if result is not None else 0
        return {"published": published, "discarded": len(set(newest) - set(keep)),
                "duplicate": bool(result and result.duplicate)}

    def _delete_staged(self, keys_: list[str]) -> None:
        for key in keys_:
            self._staged.discard(key)
            self.store.delete(key)

    async def sweep_staging(self) -> int:
        """Delete the staging objects of the queues this broker serves that it has
        seen for longer than the queue's staged_ttl_s (timed on its own monotonic
        clock from the first sweep that listed them); return how many."""
        now = self.monotonic()
        removed = 0
        listed_now: set[str] = set()
        for name, q in list(self._queues.items()):
            if not q.loop.active:
                continue
            ttl_s = (q.loop.state.settings if q.loop.state else self._settings).staged_ttl_s
            listed = await self._io(self.store.list, keys.staging_prefix(name))
            for key in listed:
                if keys.parse_staging_key(name, key) is None:
                    continue
                listed_now.add(key)
                first_seen = self._staging_seen.setdefault(key, now)
                if now - first_seen >= ttl_s:
                    await self._io(self._delete_staged, [key])
                    listed_now.discard(key)
                    removed += 1
        self._staging_seen = {k: t for k, t in self._staging_seen.items() if k in listed_now}
        if removed:
            log.info("swept %d staging object(s) of vanished writers", removed)
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

    async def claim(self, queue: str, worker: str, max_jobs: int = 1, lease_s: float = 30.0,
                    wait_s: float = 0.0, request: str | None = None,
                    floor: int | None = None) -> list[transitions.LeasedJob]:
        """Claim up to ``max_jobs``, waiting up to ``wait_s`` for one. ``request``:
        the caller's key for this call; a repeat hands back the same jobs."""
        if wait_s < 0 or wait_s > self.config.max_wait_s:
            raise InvalidRequest(f"wait_s must be within [0, {self.config.max_wait_s}]")
        op = transitions.Claim(worker, max_jobs, round(lease_s * 1000), request, floor)
        keys.check_queue_name(queue)
        deadline = self.monotonic() + wait_s
        while True:
            q = self._queues.get(queue)
            # taken before the claim, so no wake-up is missed
            ready = q.jobs_ready if q is not None and q.loop.active else None
            created = self._created
            try:
                result = await self._submit(queue, "claim", op)
            except UnknownQueue:
                jobs: list[transitions.LeasedJob] = []
            else:
                jobs = result.jobs
            remaining = deadline - self.monotonic()
            if jobs or remaining <= 0 or self._stopping:
                return list(jobs)
            if ready is None:
                q = self._queues.get(queue)
                if q is not None and q.loop.active:
                    continue  # served here since: claim again with its event
                ready = created
            try:
                await asyncio.wait_for(ready.wait(), remaining)
            except TimeoutError:
                pass

    async def heartbeat(self, queue: str, tokens: list[str],
                        lease_s: float = 30.0) -> list[transitions.ItemResult]:
        result = await self._submit(
            queue, "heartbeat", transitions.Heartbeat(tuple(tokens), round(lease_s * 1000)))
        return list(result.items)

    async def complete(self, queue: str,
                       items: list[transitions.CompleteItem]) -> list[transitions.ItemResult]:
        result = await self._submit(queue, "complete", transitions.Complete(tuple(items)))
        return list(result.items)

    async def fail(self, queue: str,
                   items: list[transitions.FailItem]) -> list[transitions.ItemResult]:
        result = await self._submit(queue, "fail", transitions.Fail(tuple(items)))
        return list(result.items)

    async def redrive(self, queue: str, ids: list[str] | None = None,
                      request: str | None = None, floor: int | None = None) -> int:
        """Return dead jobs (``ids``, or all) to pending; how many. ``request``: a
        repeat answers the first count and returns nothing more."""
        op = transitions.Redrive(tuple(ids) if ids is not None else None, request, floor)
        await self._existing(queue)
        return int((await self._submit(queue, "redrive", op)).count)

    async def purge(self, queue: str, statuses: list[str] | None = None,
                    request: str | None = None, floor: int | None = None) -> int:
        """Delete jobs by status; how many. ``request``: a repeat answers the first
        count and deletes nothing more (not the jobs pushed since)."""
        op = transitions.Purge(tuple(statuses) if statuses else (S.PENDING, S.DEAD), request,
                               floor)
        await self._existing(queue)
        return int((await self._submit(queue, "purge", op)).count)

    async def _existing(self, queue: str) -> None:
        """Raise ``UnknownQueue`` if the queue has no object (a keyed admin call must
        not create one just to hold its receipt)."""
        q = await self._serving(queue, create=False)
        if q.loop.etag is None and await self._read_object(queue) is None:
            raise UnknownQueue(f"queue {queue!r} does not exist (it is created by its first push)")

    async def set_paused(self, queue: str, paused: bool) -> None:
        await self._submit(queue, "pause" if paused else "resume", transitions.SetPaused(paused))

    # -- reads ----------------------------------------------------------------------------
    async def _read(self, queue: str, op: transitions.ReadStats | transitions.ReadJobs) -> Any:
        """A read: through the queue's loop if this broker serves it (so it sees
        committed state only, never a batch whose write is in flight), else from
        the stored object (nothing is taken over or created)."""
        q = self._queues.get(queue)
        if q is not None and q.loop.active:
            state = q.loop.state
            if state is not None and q.loop.etag is None and not state.jobs:
                raise UnknownQueue(f"queue {queue!r} does not exist "
                                   "(it is created by its first push)")
            return (await q.loop.submit(op)).view
        keys.check_queue_name(queue)
        got = await self._read_object(queue)
        if got is None:
            raise UnknownQueue(f"queue {queue!r} does not exist (it is created by its first push)")
        return transitions.apply(got[0], op, self.clock()).view

    async def stats(self, queue: str) -> dict[str, Any]:
        out: dict[str, Any] = await self._read(queue, transitions.ReadStats())
        q = self._queues.get(queue)
        loop_stats = q.loop.stats if q is not None and q.loop.active else None
        out["queue"] = queue
        out["served_by_this_broker"] = loop_stats is not None
        if q is not None and loop_stats is not None:
            out["state_bytes"] = loop_stats.state_bytes
            out["commits"] = loop_stats.commits
            out["conflicts"] = loop_stats.conflicts
            out["unknown_outcomes"] = loop_stats.unknown_outcomes
            out["last_commit_ms"] = round(loop_stats.last_commit_s * 1000, 3)
            out["fault"] = q.loop.fault
            out["archive_writes_pending"] = q.archiver.pending()
            out["archive_error"] = q.archiver.last_error
        return out

    async def jobs(self, queue: str, status: str | None = None, limit: int = 100,
                   after: str | None = None, *, raw: bool = False) -> list[dict[str, Any]]:
        """A page of jobs as plain dicts. ``raw``: payloads and results stay their
        stored JSON bytes (``orjson.Fragment``), passed through verbatim."""
        page: list[dict[str, Any]] = await self._read(
            queue, transitions.ReadJobs(status, limit, after, raw))
        return page

    def queue_names(self) -> list[str]:
        return sorted(self._known | set(self._queues))

    def health(self) -> dict[str, Any]:
        """The broker's condition and each queue's: served here (and whether its
        last batch failed, and why) or watched."""
        queues: dict[str, Any] = {}
        for name in sorted(self._known | set(self._queues)):
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
            st = q.loop.stats
            self.metrics.gauge("osqueue_commits_total", st.commits, queue=name)
            self.metrics.gauge("osqueue_conflicts_total", st.conflicts, queue=name)
            self.metrics.gauge("osqueue_unknown_outcomes_total", st.unknown_outcomes, queue=name)
            self.metrics.gauge("osqueue_answered_unknown_total", st.answered_unknown,
                               queue=name)
            self.metrics.gauge("osqueue_step_downs_total", st.step_downs, queue=name)
            self.metrics.gauge("osqueue_faults_total", st.faults, queue=name)
            self.metrics.gauge("osqueue_serving", int(q.loop.active), queue=name)
            if q.loop.state is not None and q.loop.active:
                for status, n in q.loop.state.count_by_status().items():
                    self.metrics.gauge("osqueue_jobs", n, queue=name, status=status)
