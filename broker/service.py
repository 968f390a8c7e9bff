"""The broker's own Python API (embedded mode): several named queues, each with
its own commit loop, answered only once durable.

All methods are coroutines to be awaited on the broker's event loop. The HTTP
server (:mod:`broker.http`) is a thin adapter over this class; so is
``osqueue_spark.start_broker``.

Queues come into being with their first push (or an explicit
:meth:`Broker.create_queue` with settings). A claim on a queue that does not
exist returns no jobs and creates nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from broker import api, keys, timefmt, transitions
from broker import state as S
from broker.commit import CommitLoop
from broker.errors import (
    InvalidRequest,
    NotTheBroker,
    OsqueueError,
    UnknownQueue,
)
from broker.gcpause import gc_paused
from broker.metrics import Metrics
from broker.queue_model import QueueModel
from broker.staged_cache import StagedCache
from broker.storage import ObjectStore

log = logging.getLogger("osqueue.broker")


def new_broker_id() -> str:
    host = socket.gethostname().split(".")[0][:24] or "host"
    return f"b-{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


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
    default_settings: dict[str, Any] = field(default_factory=dict)


class _Queue:
    """One queue's loop plus the event that wakes long-polling claims."""

    def __init__(self, name: str, loop: CommitLoop[S.QueueState], model: QueueModel) -> None:
        self.name = name
        self.loop = loop
        self.model = model
        self.jobs_ready = asyncio.Event()
        self.last_owner_check = 0.0

    def notify(self, state: S.QueueState) -> None:
        if state.ready and not state.paused:
            self.jobs_ready.set()
            self.jobs_ready = asyncio.Event()


class Broker:
    """Owns the queues of one store. Create it, ``await start()``, then call ops."""

    def __init__(self, store: ObjectStore, config: BrokerConfig | None = None, *,
                 clock: Callable[[], int] = timefmt.now_ms) -> None:
        self.store = store
        self.config = config or BrokerConfig()
        self.id = self.config.broker_id
        self.clock = clock
        self.metrics = Metrics()
        self._queues: dict[str, _Queue] = {}
        self._creating: dict[str, asyncio.Lock] = {}
        self._executor = ThreadPoolExecutor(self.config.io_threads, thread_name_prefix="osq-io")
        self._stopping = False
        self._sweep_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._settings = S.Settings.from_dict(self.config.default_settings)
        self._staged = StagedCache(self.config.staged_cache_bytes)

    @property
    def url(self) -> str:
        return self.config.url

    # -- lifecycle ----------------------------------------------------------------
    async def start(self) -> None:
        """Check the store, load every existing queue and take them over.

        Raises ``UnsafeStore`` if the store ignores conditional writes and a
        ``StateError`` (naming the object) if any queue object is corrupt,
        foreign or newer; nothing is written in either case.
        """
        loop = asyncio.get_running_loop()
        if self.config.self_test:
            await loop.run_in_executor(self._executor, self.store.self_test)
        names = await loop.run_in_executor(self._executor, self._existing_queue_names)
        loaded = []
        for name in names:
            q = self._make_queue(name)
            await q.loop.load()  # raises StateError before anything is written
            loaded.append(q)
        for q in loaded:
            self._queues[q.name] = q
            q.loop.start()
        # Take every queue over (write our broker record, re-lease claimed jobs)
        # before saying we are ready; a reclaim op carries the takeover.
        await asyncio.gather(*(q.loop.submit(transitions.Reclaim()) for q in loaded))
        self._sweep_task = loop.create_task(
            self._every(60.0, self.sweep_staging, "staging sweep"))
        self._watch_task = loop.create_task(
            self._every(1.0, self.check_takeover_requests, "takeover check"))
        log.info("broker %s serving %d queue(s) from %s at %s", self.id, len(loaded),
                 self.store.url, self.url or "(in-process)")

    def _existing_queue_names(self) -> list[str]:
        names = []
        for key in self.store.list(""):
            name = keys.queue_from_state_key(key)
            if name is not None:
                names.append(name)
        return names

    async def stop(self, drain_s: float = 30.0) -> None:
        """Flush buffered operations, clear our broker record, stop every loop."""
        if self._stopping:
            return
        self._stopping = True
        for task in (self._sweep_task, self._watch_task):
            if task is not None:
                task.cancel()
        for q in list(self._queues.values()):
            q.model.retiring = True
            if q.loop.active and q.loop.etag is not None:
                try:
                    await asyncio.wait_for(
                        q.loop.submit(transitions.ClearBroker(self.id)), drain_s)
                except (OsqueueError, TimeoutError) as exc:
                    log.warning("could not clear broker record of %s: %s", q.name, exc)
            await q.loop.close()
        await asyncio.get_running_loop().run_in_executor(self._executor, self.store.settle)
        self._executor.shutdown(wait=False)
        log.info("broker %s stopped", self.id)

    # -- queues ---------------------------------------------------------------------
    def _make_queue(self, name: str, settings: S.Settings | None = None) -> _Queue:
        model = QueueModel(self.store, name, self.id, self.url,
                           round(self.config.lease_s * 1000), settings or self._settings)
        holder: list[_Queue] = []

        def observe(seconds: float, batch: int, state_bytes: int) -> None:
            self.metrics.commit(seconds, batch)
            self.metrics.gauge("osqueue_state_bytes", state_bytes, queue=name)

        loop: CommitLoop[S.QueueState] = CommitLoop(
            self.store, keys.state_key(name), model, self.id, self._executor,
            clock=self.clock,
            on_commit=lambda st, _results: holder[0].notify(st),
            on_timer=lambda st: holder[0].notify(st),
            observe=observe,
        )
        q = _Queue(name, loop, model)
        holder.append(q)
        return q

    async def _queue(self, name: str) -> _Queue:
        q = self._queues.get(name)
        if q is None:
            keys.check_queue_name(name)
            if self._stopping:
                raise OsqueueError("broker is shutting down")
            lock = self._creating.setdefault(name, asyncio.Lock())
            async with lock:
                q = self._queues.get(name)
                if q is None:
                    q = self._make_queue(name)
                    await q.loop.load()
                    self._queues[name] = q
                    q.loop.start()
        if not q.loop.active:
            await self._maybe_retake(q)
        return q

    async def _maybe_retake(self, q: _Queue) -> None:
        """A stepped-down queue is taken back only once the other broker's lease ran out."""
        now = time.monotonic()
        if now - q.last_owner_check < 1.0:
            return
        q.last_owner_check = now
        loop = asyncio.get_running_loop()
        # Read a newcomer's takeover request BEFORE the state: it deletes the request
        # only after its write landed, so this order never sees "our record, no
        # request" while a newcomer is taking over.
        request = await self._fresh_request(q.name)
        try:
            got = await loop.run_in_executor(self._executor, self.store.read,
                                             keys.state_key(q.name))
        except OsqueueError:
            return
        record = S.decode(got.data).broker
        if record is None or record.id != self.id:
            request = None  # someone else owns it now; follow the record
        if (record is None or record.expires_ms <= self.clock()
                or (record.id == self.id and request is None)):
            log.info("queue %s: no live broker owns it; taking it back", q.name)
            q.loop.reactivate()
        else:
            url = request["url"] if request is not None else record.url
            q.loop.step_down_error = NotTheBroker(
                f"this broker no longer serves queue {q.name!r}; it is served by {url}",
                url=url, queue=q.name)

    async def _submit(self, queue: str, opname: str, op: Any) -> Any:
        q = await self._queue(queue)
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
        await self._submit(name, "configure", transitions.Configure(dict(settings or {})))
        return await self.stats(name)

    # -- operations -------------------------------------------------------------------
    async def push(self, queue: str, jobs: Sequence[transitions.NewJob | bytes]) -> list[str]:
        """Enqueue ``jobs`` (bare bytes: a payload's JSON with default options) in one
        commit; return their ids in order."""
        if not jobs:
            raise InvalidRequest("push needs at least one job")
        result = await self._submit(queue, "push", transitions.push_of(jobs))
        return list(result.ids)

    # -- staged writes (Spark's exactly-once enqueue) ---------------------------------
    #
    # A task stages a chunk of jobs as its own immutable object (no CAS, no
    # commit: staging costs nothing in the queue object). The driver's publish
    # reads the chunks of the successful attempts and pushes them in ONE commit,
    # marked with a "once" key so a repeated publish adds nothing; then every
    # staging object of the write is deleted. Objects of a writer that vanished
    # are swept after the queue's staged_ttl_s.

    async def stage(self, queue: str, write_id: str, lines: bytes) -> int:
        """Store staged lines (see :mod:`broker.api`) as one staging object; return
        how many jobs they hold. Raises ``InvalidRequest`` or ``PayloadTooLarge``
        (storing nothing) if any line is bad."""
        keys.check_queue_name(queue)
        keys.check_write_id(write_id)
        key = keys.staging_key(queue, write_id, self.clock())
        count = await asyncio.get_running_loop().run_in_executor(
            self._executor, self._check_and_put, key, lines)
        self.metrics.op(queue, "stage", "ok")
        return count

    def _check_and_put(self, key: str, lines: bytes) -> int:
        jobs = api.parse_staged(lines, check=True,
                                max_payload_bytes=self._settings.max_payload_bytes)
        if not jobs:
            raise InvalidRequest("nothing to stage: no job lines")
        self.store.put(key, lines)
        self._staged.put(key, jobs, len(lines))
        return len(jobs)

    def _staged_objects(self, queue: str, prefix: str) -> dict[str, str]:
        """write id -> one staging object key, for the write ids under ``prefix``."""
        found: dict[str, str] = {}
        for key in self.store.list(keys.staging_prefix(queue) + prefix):
            parsed = keys.parse_staging_key(queue, key)
            if parsed is not None:
                found.setdefault(parsed[0], key)  # a re-staged chunk has the same content
        return found

    def _read_staged(self, key: str) -> list[transitions.NewJob | bytes]:
        jobs = self._staged.pop(key)
        if jobs is not None:
            return jobs
        with gc_paused():
            return api.parse_staged(self.store.get(key), check=False, where=key)

    async def publish(self, queue: str, prefix: str, keep: list[str],
                      once: str | None = None) -> dict[str, Any]:
        """Push the staged chunks ``keep`` in one commit; drop every staging object
        under ``prefix``. Raises ``InvalidRequest`` (and publishes nothing) if a
        chunk to keep is missing."""
        keys.check_queue_name(queue)
        loop = asyncio.get_running_loop()
        staged = await loop.run_in_executor(self._executor, self._staged_objects, queue, prefix)
        result = None
        if keep:
            missing = [w for w in keep if w not in staged]
            if missing:
                q = self._queues.get(queue)
                state = q.loop.state if q is not None else None
                if once is not None and state is not None and once in state.keys:
                    result = transitions.Result(duplicate=True)  # published before
                else:
                    raise InvalidRequest(f"{len(missing)} staged chunk(s) are missing, e.g. "
                                         f"{missing[0]!r}; nothing was published")
            if result is None:
                chunks = await asyncio.gather(*(loop.run_in_executor(
                    self._executor, self._read_staged, staged[w]) for w in keep))
                result = await self._submit(queue, "publish", transitions.push_of(
                    [job for chunk in chunks for job in chunk], once))
        await loop.run_in_executor(self._executor, self._delete_staged, list(staged.values()))
        published = len(result.ids) if result is not None else 0
        return {"published": published, "discarded": len(set(staged) - set(keep)),
                "duplicate": bool(result and result.duplicate)}

    def _delete_staged(self, keys_: list[str]) -> None:
        for key in keys_:
            self._staged.discard(key)
            self.store.delete(key)

    async def sweep_staging(self) -> int:
        """Delete staging objects older than each queue's staged_ttl_s; return how many."""
        loop = asyncio.get_running_loop()
        now = self.clock()
        removed = 0
        for name, q in list(self._queues.items()):
            ttl_ms = round((q.loop.state.settings if q.loop.state else self._settings)
                           .staged_ttl_s * 1000)
            listed = await loop.run_in_executor(self._executor, self.store.list,
                                                keys.staging_prefix(name))
            for key in listed:
                parsed = keys.parse_staging_key(name, key)
                if parsed is not None and parsed[1] + ttl_ms <= now:
                    await loop.run_in_executor(self._executor, self._delete_staged, [key])
                    removed += 1
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

    async def _fresh_request(self, queue: str) -> dict[str, Any] | None:
        """Another broker's takeover request for ``queue`` from the last 10 seconds."""
        loop = asyncio.get_running_loop()
        try:
            raw = await loop.run_in_executor(self._executor, self.store.get,
                                             keys.takeover_key(queue))
            request = orjson.loads(raw)
        except (OsqueueError, orjson.JSONDecodeError):
            return None
        if not isinstance(request, dict) or request.get("id") == self.id:
            return None
        if request.get("at_ms", 0) < self.clock() - 10_000:
            return None
        return request

    async def check_takeover_requests(self) -> None:
        """Hand a queue over to a broker that asked for it in the last 10 seconds.

        A newcomer that keeps losing the CAS race to a busy broker leaves a
        request object; CAS alone would let it starve.
        """
        for name, q in list(self._queues.items()):
            if not q.loop.active or not q.loop.owned:
                continue
            request = await self._fresh_request(name)
            if request is None:
                continue
            url = request.get("url")
            log.warning("queue %s: broker %s at %s asked to take over; handing it over",
                        name, request.get("id"), url)
            q.loop.yield_to(NotTheBroker(
                f"this broker handed queue {name!r} over to {url}", url=url, queue=name))

    async def claim(self, queue: str, worker: str, max_jobs: int = 1, lease_s: float = 30.0,
                    wait_s: float = 0.0) -> list[transitions.ClaimedJob]:
        if wait_s < 0 or wait_s > self.config.max_wait_s:
            raise InvalidRequest(f"wait_s must be within [0, {self.config.max_wait_s}]")
        op = transitions.Claim(worker, max_jobs, round(lease_s * 1000))
        if queue not in self._queues:
            keys.check_queue_name(queue)
        deadline = time.monotonic() + wait_s
        while True:
            q = await self._queue(queue)
            ready = q.jobs_ready  # taken before the claim, so no wake-up is missed
            result = await self._submit(queue, "claim", op)
            remaining = deadline - time.monotonic()
            if result.jobs or remaining <= 0 or self._stopping:
                return list(result.jobs)
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

    async def redrive(self, queue: str, ids: list[str] | None = None) -> int:
        op = transitions.Redrive(tuple(ids) if ids is not None else None)
        return int((await self._submit(queue, "redrive", op)).count)

    async def purge(self, queue: str, statuses: list[str] | None = None) -> int:
        op = transitions.Purge(tuple(statuses)) if statuses else transitions.Purge()
        return int((await self._submit(queue, "purge", op)).count)

    async def set_paused(self, queue: str, paused: bool) -> None:
        await self._submit(queue, "pause" if paused else "resume", transitions.SetPaused(paused))

    # -- reads ----------------------------------------------------------------------------
    async def _existing(self, queue: str) -> S.QueueState:
        q = await self._queue(queue)
        if not q.loop.active and q.loop.step_down_error is not None:
            raise q.loop.step_down_error
        state = q.loop.state
        if state is None or (q.loop.etag is None and not state.jobs):
            raise UnknownQueue(f"queue {queue!r} does not exist (it is created by its first push)")
        return state

    async def stats(self, queue: str) -> dict[str, Any]:
        state = await self._existing(queue)
        now = self.clock()
        out = transitions.stats(state, now)
        q = self._queues[queue]
        out["queue"] = queue
        out["state_bytes"] = q.loop.stats.state_bytes
        out["commits"] = q.loop.stats.commits
        out["conflicts"] = q.loop.stats.conflicts
        out["last_commit_ms"] = round(q.loop.stats.last_commit_s * 1000, 3)
        return out

    async def jobs(self, queue: str, status: str | None = None, limit: int = 100,
                   after: str | None = None) -> list[dict[str, Any]]:
        state = await self._existing(queue)
        return [job.to_plain() for job in transitions.list_jobs(state, status, limit, after)]

    def queue_names(self) -> list[str]:
        return sorted(self._queues)

    def refresh_gauges(self) -> None:
        for name, q in self._queues.items():
            st = q.loop.stats
            self.metrics.gauge("osqueue_commits_total", st.commits, queue=name)
            self.metrics.gauge("osqueue_conflicts_total", st.conflicts, queue=name)
            self.metrics.gauge("osqueue_unknown_outcomes_total", st.unknown_outcomes, queue=name)
            self.metrics.gauge("osqueue_step_downs_total", st.step_downs, queue=name)
            if q.loop.state is not None:
                for status, n in q.loop.state.count_by_status().items():
                    self.metrics.gauge("osqueue_jobs", n, queue=name, status=status)

