"""The clients of a run: producer and consumer threads on ``QueueClient`` (given every
broker URL; it finds the owner itself), and the record of everything they were told
(acknowledged ids, claims, complete answers, errors), which the checker and the
availability figures read. All recorded times are seconds since the run started."""

from __future__ import annotations

import argparse
import collections
import functools
import random
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from broker.errors import OsqueueError
from osqueue_spark import QueueClient
from tools.chaos.bulk import bulk_push, publish
from tools.chaos.groups import ClaimLog, group_of
from tools.chaos.store import QUEUE


def queue_client(urls: Sequence[str], *, store: str, timeout_s: float, retry_s: float,
                 start: int = 0) -> QueueClient:
    """A client of the queue given every broker URL, the list rotated by ``start`` so
    that clients try different brokers first; ``timeout_s`` per request and
    ``retry_s`` of retrying, both in seconds."""
    ordered = list(urls[start % len(urls):]) + list(urls[:start % len(urls)])
    return QueueClient(ordered, QUEUE, store=store, timeout_s=timeout_s, retry_s=retry_s)


def error_code(exc: BaseException) -> str:
    """The broker's error code, or the exception's type name."""
    if isinstance(exc, OsqueueError):
        return exc.code
    return type(exc).__name__


@dataclass
class Completion:
    """One answer to a complete: ``t`` seconds since the run started; ``late``: the
    complete of a lapsed job, sent after its lease ran out."""

    token: str
    job_id: str
    worker: str
    ok: bool
    reason: str | None
    t: float
    late: bool = False


class Recorder:
    """Everything the clients saw, for the checker and the availability figures.
    Times are seconds since the run started."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.acked: dict[str, str] = {}          # payload key -> first acknowledged job id
        self.acked_t: dict[str, float] = {}      # payload key -> when acknowledged
        self.acked_published: set[str] = set()   # payload keys a publish acknowledged (no ids)
        self.anomalies: list[dict[str, Any]] = []  # answers no broker may give
        self.claims: dict[str, list[tuple[str, str, float]]] = {}  # job -> (token, worker, t)
        self.attempted: set[str] = set()         # payload keys of pushes that raised
        # a payload acknowledged again under another id: {"payload", "first", "again"}
        self.ack_conflicts: list[dict[str, Any]] = []
        self.completions: list[Completion] = []
        self.complete_unknown: list[dict[str, Any]] = []
        self.ok_completed: set[str] = set()
        self.successes: list[tuple[float, float]] = []  # (call started, answered)
        self.counts: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()
        self.error_samples: dict[str, str] = {}
        self.claimed_after_complete: list[dict[str, Any]] = []
        self.claim_mismatch: list[dict[str, Any]] = []
        self.finished = 0  # ok completions (for the backlog estimate)
        self.push_failures: list[dict[str, Any]] = []
        self.died: set[str] = set()       # ids a fail answered "dead"
        self.redriven: set[str] = set()   # ids a redrive by id named (a redrive of all: none)
        # every claim, ok heartbeat and settlement, for the checks of groups
        self.log = ClaimLog(time.time() - clock())

    def progress(self, started: float) -> None:
        self.successes.append((started, self.clock()))  # list.append is atomic

    def error(self, op: str, exc: BaseException) -> None:
        key = f"{op}:{error_code(exc)}"
        with self.lock:
            self.errors[key] += 1
            self.error_samples.setdefault(key, str(exc)[:300])

    def pushed(self, keys_: list[str], ids: list[str], started: float) -> None:
        with self.lock:
            for k, job_id in zip(keys_, ids, strict=True):
                old = self.acked.get(k)
                if old is None:
                    self.acked[k] = job_id
                elif old != job_id:  # the first id stays: the checker looks for both
                    self.ack_conflicts.append({"payload": k, "first": old, "again": job_id})
                self.acked_t.setdefault(k, self.clock())
                self.attempted.discard(k)
            self.counts["push_ok"] += 1
            self.counts["jobs_acked_answers"] += len(ids)
        self.progress(started)

    def grouped_pushed(self, jobs: list[Any]) -> None:
        """Count the acknowledged jobs of ``jobs`` (push bodies) that have a group."""
        n = sum(1 for j in jobs if isinstance(j, dict) and j.get("group") is not None)
        if n:
            with self.lock:
                self.counts["grouped_jobs_acked"] += n
                self.counts["grouped_pushes_ok"] += 1

    def push_failed(self, keys_: list[str], exc: BaseException | None = None) -> None:
        with self.lock:
            self.push_failures.append({"t": round(self.clock(), 3), "first": keys_[0],
                                       "jobs": len(keys_),
                                       "error": None if exc is None else str(exc)[:200]})
            for k in keys_:
                if k not in self.acked:
                    self.attempted.add(k)
            self.counts["push_failed"] += 1

    def published(self, keys_: list[str], started: float, duplicate: bool) -> None:
        """A publish of the payloads ``keys_`` answered success (``duplicate``: a repeat
        of one that had landed): each acknowledged once, without an id."""
        with self.lock:
            now = self.clock()
            for k in keys_:
                self.acked_published.add(k)
                self.acked_t.setdefault(k, now)
                self.attempted.discard(k)
            self.counts["publish_ok"] += 1
            self.counts["publish_duplicate_answers"] += int(duplicate)
            self.counts["jobs_acked_by_publish"] += len(keys_)
        self.progress(started)

    def publish_failed(self, keys_: list[str], exc: BaseException | None) -> None:
        """A publish of ``keys_`` gave up: they may or may not be in the queue (once)."""
        with self.lock:
            self.push_failures.append({"t": round(self.clock(), 3), "first": keys_[0],
                                       "jobs": len(keys_), "publish": True,
                                       "error": None if exc is None else str(exc)[:200]})
            for k in keys_:
                if k not in self.acked_published:
                    self.attempted.add(k)
            self.counts["publish_failed"] += 1

    def anomaly(self, what: str, **detail: Any) -> None:
        """An answer no broker may give (a checker failure)."""
        with self.lock:
            if len(self.anomalies) < 1000:
                self.anomalies.append({"what": what, "t": round(self.clock(), 3), **detail})
            self.counts[f"anomaly_{what}"] += 1

    def acknowledgements(self) -> list[tuple[str, str]]:
        """Every (payload key, job id) a push answered: the first id of each payload
        and every other id an ack conflict gave it."""
        with self.lock:
            return [*self.acked.items(),
                    *((c["payload"], c["again"]) for c in self.ack_conflicts)]

    def acked_count(self) -> int:
        return len(self.acked) + len(self.acked_published)

    def backlog(self) -> int:
        return self.acked_count() - self.finished

    def claimed(self, jobs: list[Any], worker: str, started: float, lease_s: float) -> None:
        """A claim sent at ``started`` answered ``jobs``, each leased ``lease_s`` s."""
        with self.lock:
            self.counts["claims_with_jobs"] += 1
            self.counts["jobs_claimed"] += len(jobs)
            t = self.clock()
            self.counts["grouped_jobs_claimed"] += sum(1 for j in jobs if j.group is not None)
            for j in jobs:
                self.claims.setdefault(j.id, []).append((j.token, worker, t))
                if j.id in self.ok_completed and len(self.claimed_after_complete) < 1000:
                    self.claimed_after_complete.append(
                        {"job": j.id, "token": j.token, "worker": worker, "t": self.clock()})
                k = payload_key(j.payload)
                if k is not None and k in self.acked and self.acked[k] != j.id:
                    self.claim_mismatch.append({"job": j.id, "payload": k,
                                                "acked_id": self.acked[k]})
        self.log.claimed(jobs, worker, started, t, lease_s)
        self.progress(started)

    def completed(self, items: list[tuple[str, str]], results: list[Any], worker: str,
                  started: float, late: bool = False) -> None:
        t = self.clock()
        any_ok = False
        with self.lock:
            for (token, job_id), r in zip(items, results, strict=True):
                ok = bool(r.ok)
                any_ok = any_ok or ok
                self.completions.append(Completion(token, job_id, worker, ok, r.reason, t,
                                                   late))
                if ok:
                    self.ok_completed.add(job_id)
                    self.finished += 1
                    self.counts["complete_ok"] += 1
                else:
                    self.counts["complete_stale"] += 1
        if any_ok:
            self.progress(started)

    def complete_failed(self, items: list[tuple[str, str]], worker: str) -> None:
        with self.lock:
            for token, job_id in items:
                self.complete_unknown.append({"token": token, "job": job_id, "worker": worker,
                                              "t": self.clock()})
            self.counts["complete_unknown"] += len(items)


def payload_key(payload: Any) -> str | None:
    """``"P:N"`` for a runner's payload ``{"p": P, "n": N}``, else None."""
    if isinstance(payload, dict) and isinstance(payload.get("p"), int) \
            and isinstance(payload.get("n"), int):
        return f"{payload['p']}:{payload['n']}"
    return None


def doomed(payload: Any, every: int) -> bool:
    """True if the job of ``payload`` must fail on every attempt (``every`` > 0 and
    its ``n`` a multiple of it)."""
    if every <= 0:
        return False
    key = payload_key(payload)
    return key is not None and int(key.rsplit(":", 1)[1]) % every == 0


def retry_delay(rng: random.Random, retry_max_s: float) -> float:
    """The ``retry_in_s`` of an injected failure: 0 half the time, else up to
    ``retry_max_s`` s."""
    return 0.0 if retry_max_s <= 0 or rng.random() < 0.5 else round(
        rng.uniform(0.1, retry_max_s), 3)


def fail_jobs(client: QueueClient, rec: Recorder, jobs: list[tuple[Any, float]],
              why: str) -> None:
    """Fail each (job, retry_in_s) of ``jobs``; record the answers: failed (by delay),
    dead (the job's id kept as died), stale. A call that raised is recorded as an
    error (the jobs lapse and come back)."""
    if not jobs:
        return
    tokens = [j.token for j, _ in jobs]
    started = rec.clock()
    try:
        results = client.fail_many([(j.token, why, delay) for j, delay in jobs])
    except Exception as exc:
        rec.error("fail", exc)
        rec.log.settled("fail", tokens, started, None, None)
        return
    rec.log.settled("fail", tokens, started, rec.clock(), results)
    with rec.lock:
        for (j, delay), r in zip(jobs, results, strict=True):
            if not r.ok:
                rec.counts["fail_stale"] += 1
            elif r.status == "dead":
                rec.counts["fail_dead"] += 1
                rec.died.add(j.id)
            else:
                rec.counts["fail_ok"] += 1
                rec.counts["fail_retry_now" if delay == 0 else "fail_retry_later"] += 1


class RateLimiter:
    """Hands out ``rate`` tokens per second (a burst of at most ``burst`` tokens, default
    one second's worth, which it starts with)."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = max(rate, 0.001)
        self.burst = self.rate if burst is None else max(burst, self.rate)
        self.tokens = 0.0 if burst is None else self.burst
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def wait(self, n: int, stop: threading.Event) -> bool:
        """Block until ``n`` tokens were taken (True) or ``stop`` is set (False)."""
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            self.tokens -= n
            deficit = -self.tokens
        if deficit > 0:
            return not stop.wait(deficit / self.rate)
        return not stop.is_set()


class Workers:
    """Producer and consumer threads (what they do: step 2 of the runner's help, the
    docstring of tools/chaos/cli.py). ``run_tag`` makes the per-job keys of
    ``--push-keys`` unique to the run."""

    def __init__(self, args: argparse.Namespace, urls: list[str], store_url: str,
                 rec: Recorder, run_tag: str) -> None:
        self.args = args
        self.urls = urls
        self.store_url = store_url
        self.rec = rec
        self.run_tag = run_tag
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.draining = threading.Event()
        # set while a claim the owner is killed around waits for the queue to fill:
        # the other consumers claim nothing meanwhile
        self.hold_claims = threading.Event()
        self.limiter = RateLimiter(args.push_rate)
        # bulk pushes and publishes share their own rate; the first goes at once
        self.bulk_limiter = RateLimiter(args.bulk_rate, burst=args.bulk_max)
        self.threads: list[threading.Thread] = []
        self.crashes: list[str] = []

    def client(self, start: int) -> QueueClient:
        return queue_client(self.urls, store=self.store_url,
                            timeout_s=self.args.client_timeout_s,
                            retry_s=self.args.client_retry_s, start=start)

    def start(self, extra: Sequence[tuple[str, Callable[[int], None], int]] = ()) -> None:
        """Start every thread; ``extra``: more kinds of thread, (name, function, how
        many), each called with its index."""
        for name, fn, n in extra:
            for i in range(n):
                self.threads.append(threading.Thread(target=self._guard, args=(fn, i),
                                                     name=f"{name}-{i}", daemon=True))
        for i in range(self.args.producers):
            self.threads.append(threading.Thread(target=self._guard, args=(self.produce, i),
                                                 name=f"producer-{i}", daemon=True))
        if self.args.bulk_rate > 0:
            for i in range(self.args.bulk_producers):
                self.threads.append(threading.Thread(
                    target=self._guard, args=(functools.partial(bulk_push, self), i),
                    name=f"producer-bulk-{i}", daemon=True))
            for i in range(self.args.publishers):
                self.threads.append(threading.Thread(
                    target=self._guard, args=(functools.partial(publish, self), i),
                    name=f"producer-publish-{i}", daemon=True))
        for i in range(self.args.consumers):
            self.threads.append(threading.Thread(target=self._guard, args=(self.consume, i),
                                                 name=f"consumer-{i}", daemon=True))
        for t in self.threads:
            t.start()

    def _guard(self, fn: Callable[[int], None], i: int) -> None:
        try:
            fn(i)
        except BaseException:
            self.crashes.append(f"{threading.current_thread().name}: "
                                f"{traceback.format_exc()[-2000:]}")

    def join_producers(self, timeout_s: float) -> list[str]:
        """Join the producer threads within ``timeout_s`` s; the names still running."""
        deadline = time.monotonic() + timeout_s
        producers = [t for t in self.threads if t.name.startswith("producer")]
        for t in producers:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in producers if t.is_alive()]

    def join(self, timeout_s: float) -> list[str]:
        """Join every thread within ``timeout_s`` s in all; the names still running."""
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive()]

    # -- producers ---------------------------------------------------------------------
    def produce(self, i: int) -> None:
        args, rec = self.args, self.rec
        rng = random.Random(f"{args.seed}-producer-{i}")
        grng = random.Random(f"{args.seed}-producer-groups-{i}")
        client = self.client(i)
        pad = "x" * args.pad_bytes if args.pad_bytes > 0 else None
        counter = 0
        retry: list[dict[str, Any]] | None = None
        tries = 0
        try:
            # after the stop, a failed keyed batch is still pushed again (until it is
            # acknowledged or it failed 20 times), so its fate is known before the drain
            while not self.stop_producing.is_set() or retry is not None:
                if retry is None:
                    while rec.backlog() > args.max_backlog and \
                            not self.stop_producing.wait(0.2):
                        pass
                    n = rng.randint(1, 50)
                    if not self.limiter.wait(n, self.stop_producing):
                        break
                    batch = []
                    for _ in range(n):
                        payload: dict[str, Any] = {"p": i, "n": counter}
                        if pad is not None:
                            payload["pad"] = pad
                        job: dict[str, Any] = {"payload": payload}
                        if args.push_keys:
                            job["key"] = f"{self.run_tag}-{i}-{counter}"
                        if args.groups > 0:
                            job["group"] = group_of(grng, args.groups, args.group_skew)
                        batch.append(job)
                        counter += 1
                    tries = 0
                else:
                    batch, retry = retry, None
                    tries += 1
                pkeys = [f"{i}:{j['payload']['n']}" for j in batch]
                started = rec.clock()
                try:
                    ids = client.push_many(batch, batch_size=len(batch))
                except Exception as exc:
                    rec.error("push", exc)
                    rec.push_failed(pkeys, exc)
                    if args.push_keys and tries < 20:
                        retry = batch  # the same jobs, the same keys
                    time.sleep(rng.uniform(0.05, 0.3))
                    continue
                if len(ids) != len(batch):
                    rec.error("push", RuntimeError(f"{len(batch)} jobs, {len(ids)} ids"))
                    rec.push_failed(pkeys)
                    continue
                rec.pushed(pkeys, list(ids), started)
                rec.grouped_pushed(batch)
        finally:
            client.close()

    # -- consumers -------------------------------------------------------------------------
    def consume(self, i: int) -> None:
        args, rec = self.args, self.rec
        rng = random.Random(f"{args.seed}-consumer-{i}")
        worker = f"w{i}"
        client = self.client(args.producers + i)
        late: list[tuple[float, Any]] = []  # (monotonic due, job) lapsed, completed late
        try:
            while not self.stop_consuming.is_set():
                now = time.monotonic()
                due = [j for t, j in late if t <= now]
                if due:
                    late = [(t, j) for t, j in late if t > now]
                    self._complete(client, worker, due, rng, late=True)
                if self.hold_claims.is_set():
                    self.stop_consuming.wait(0.05)
                    continue
                started = rec.clock()
                try:
                    jobs = client.claim(worker, max_jobs=rng.randint(1, args.claim_max),
                                        lease_s=args.job_lease_s, wait_s=args.claim_wait_s,
                                        wait_for_queue=True)  # (may start before producers)
                except Exception as exc:
                    rec.error("claim", exc)
                    self.stop_consuming.wait(rng.uniform(0.05, 0.3))
                    continue
                if not jobs:
                    continue
                rec.claimed(jobs, worker, started, args.job_lease_s)
                draining = self.draining.is_set()
                completes, fails = [], []
                for j in jobs:
                    r = rng.random()
                    if not draining and r < args.lapse_prob:
                        with rec.lock:
                            rec.counts["lapsed"] += 1
                        if rng.random() < 0.5:
                            late.append((time.monotonic() + args.job_lease_s + 1.0, j))
                    elif not draining and doomed(j.payload, args.doom_every):
                        fails.append((j, 0.0))
                    elif not draining and r < args.lapse_prob + args.fail_prob:
                        fails.append((j, retry_delay(rng, args.retry_max_s)))
                    else:
                        completes.append(j)
                if completes:
                    self._complete(client, worker, completes, rng)
                fail_jobs(client, rec, fails, "chaos: injected failure")
        finally:
            client.close()

    def complete(self, client: QueueClient, worker: str, jobs: list[Any],
                 rng: random.Random) -> None:
        """Complete ``jobs`` (tried 3 times), as the consumers do; recorded."""
        self._complete(client, worker, jobs, rng)

    def _complete(self, client: QueueClient, worker: str, jobs: list[Any], rng: random.Random,
                  late: bool = False) -> None:
        items = [(j.token, j.id) for j in jobs]
        body = [(j.token, {"by": worker, "token": j.token}) for j in jobs]
        tokens = [j.token for j in jobs]
        first_sent = self.rec.clock()
        for attempt in range(3):
            started = self.rec.clock()
            try:
                results = client.complete_many(body)
            except Exception as exc:
                self.rec.error("complete", exc)
                if attempt == 2 or self.stop_consuming.is_set():
                    self.rec.complete_failed(items, worker)
                    self.rec.log.settled("complete", tokens, first_sent, None, None)
                    return
                self.stop_consuming.wait(rng.uniform(0.05, 0.3))
                continue
            self.rec.log.settled("complete", tokens, first_sent, self.rec.clock(), results)
            self.rec.completed(items, list(results), worker, started, late=late)
            return
