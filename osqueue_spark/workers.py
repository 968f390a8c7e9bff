"""Workers: ``process()`` for ``mapInPandas`` and ``claim_one()`` for hand-written loops.

``process(fn, broker=..., queue=...)`` returns a function for
``df.mapInPandas(f, RESULT_SCHEMA)``. Each Spark task becomes a worker: it
claims jobs in batches, calls ``fn(payload)`` for each while a background
thread heartbeats every job it holds, completes the job with fn's return
value (JSON) or fails it with the error text and the traceback's tail, and
yields one row per job. It stops when the queue stays empty for ``idle_s``,
or at ``max_jobs`` or ``max_seconds``. The input rows are ignored: use them
only to choose the number of workers, e.g. ``spark.range(8).repartition(8)``.

A worker process that dies mid-job loses nothing: the job's lease runs out
and the broker hands it to another worker (attempts + 1).

A job cancelled while the worker holds it (``QueueClient.cancel``) is told to
the worker by its next heartbeat, or by the answer to its complete or fail:
the worker stops heartbeating it, does not start ``fn`` on it if it has not
yet (``fn`` already running on it is not interrupted: Python cannot stop it),
settles nothing for it, and reports it with status ``cancelled``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import traceback
from collections.abc import Callable, Container, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from broker.errors import InvalidRequest
from broker.limits import MAX_CLAIM_JOBS, MAX_LEASE_S
from broker.wire import CANCELLED
from osqueue_spark.client import ClaimedJob, ItemResult, QueueClient
from osqueue_spark.heartbeat import Heartbeater

RESULT_SCHEMA = (
    "id string, status string, attempts int, result string, error string, "
    "worker string, started timestamp, finished timestamp"
)
RESULT_COLUMNS = ["id", "status", "attempts", "result", "error", "worker", "started", "finished"]
TRACEBACK_CHARS = 2000


def _as_time(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)


def _worker_name(prefix: str) -> str:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except ImportError:
        ctx = None
    part = f"p{ctx.partitionId()}-a{ctx.attemptNumber()}" if ctx is not None else "driver"
    return f"{prefix}-{socket.gethostname().split('.')[0]}-{os.getpid()}-{part}"


def error_text(exc: BaseException) -> str:
    """``Type: message`` plus the tail of the traceback."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return f"{type(exc).__name__}: {exc}\n{tb[-TRACEBACK_CHARS:]}"


@dataclass(frozen=True)
class ProcessConfig:
    broker: str
    queue: str
    token: str | None = None
    batch_size: int = 16
    lease_s: float = 60.0
    idle_s: float = 5.0
    max_jobs: int | None = None
    max_seconds: float | None = None
    retry_in_s: float | None = None
    worker_prefix: str = "spark"
    wait_for_queue: bool = False

    def __repr__(self) -> str:  # never the token
        return f"ProcessConfig(broker={self.broker!r}, queue={self.queue!r})"


def _run_batch(fn: Callable[[Any], Any], jobs: list[ClaimedJob], worker: str,
               retry_in_s: float | None,
               cancelled: Container[str] = ()) -> tuple[list[tuple[Any, ...]],
                                                        list[tuple[str, Any]],
                                                        list[tuple[str, str, float | None]]]:
    """Run ``fn`` on each job: (rows, completes, fails). A job whose token is in
    ``cancelled`` by the time its turn comes is not run (its row: cancelled).

    Rows carry their start and finish times as epoch seconds (floats): a
    clock read costs a tenth of a datetime, and pandas converts a whole
    column at once.
    """
    completes: list[tuple[str, Any]] = []
    fails: list[tuple[str, str, float | None]] = []
    rows: list[tuple[Any, ...]] = []
    clock = time.time
    for job in jobs:
        began = clock()
        if job.token in cancelled:  # told by a heartbeat while an earlier job ran
            rows.append((job.id, CANCELLED, job.attempt, None, None, worker, began, began))
            continue
        try:
            value = fn(job.payload)
            encoded = orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()
        except Exception as exc:  # the job failed, not the worker
            text = error_text(exc)
            fails.append((job.token, text, retry_in_s))
            rows.append((job.id, "failed", job.attempt, None, text[:TRACEBACK_CHARS],
                         worker, began, clock()))
        else:
            completes.append((job.token, orjson.Fragment(encoded)))
            rows.append((job.id, "completed", job.attempt, encoded, None, worker,
                         began, clock()))
    return rows, completes, fails


def run_worker(fn: Callable[[Any], Any], cfg: ProcessConfig,
               client: QueueClient | None = None) -> Iterator[tuple[Any, ...]]:
    """Claim and process jobs until idle or a budget runs out; yield one row per job
    (the columns of ``RESULT_COLUMNS``, times as UTC datetimes)."""
    for rows in _settled_batches(fn, cfg, client):
        for row in rows:
            yield (*row[:6], _as_time(row[6]), _as_time(row[7]))


def _settled_batches(fn: Callable[[Any], Any], cfg: ProcessConfig,
                     client: QueueClient | None = None) -> Iterator[list[tuple[Any, ...]]]:
    """:func:`run_worker`'s loop: each batch's rows once settled, times as epoch seconds.

    Pipelined, so the worker seldom waits for the broker's writes: the next
    batch is claimed while this one runs, and a finished batch is completed
    while the next one runs. A batch's rows are yielded once its complete
    has landed, one batch behind.
    """
    client = client or QueueClient(cfg.broker, cfg.queue, token=cfg.token)
    worker = _worker_name(cfg.worker_prefix)
    claimed = 0
    started_at = time.monotonic()

    def budget() -> int:
        """How many jobs the next claim may take; 0 when a budget ran out."""
        if cfg.max_seconds is not None and time.monotonic() - started_at >= cfg.max_seconds:
            return 0
        if cfg.max_jobs is None:
            return cfg.batch_size
        return max(0, min(cfg.batch_size, cfg.max_jobs - claimed))

    with Heartbeater(client, cfg.lease_s) as hb, \
            ThreadPoolExecutor(3, thread_name_prefix="osqueue-worker") as pool:

        def claim(want: int) -> list[ClaimedJob]:
            jobs = client.claim(worker, want, cfg.lease_s, wait_s=cfg.idle_s,
                                wait_for_queue=cfg.wait_for_queue)
            hb.add(j.token for j in jobs)  # held from now: keep the leases alive
            return jobs

        def settle(jobs: list[ClaimedJob], rows: list[tuple[Any, ...]],
                   completes: list[tuple[str, Any]],
                   fails: list[tuple[str, str, float | None]]) -> list[tuple[Any, ...]]:
            """Complete and fail a processed batch; its rows with the final status."""
            lost, cancelled = hb.lost, hb.cancelled
            results: dict[str, ItemResult] = {}
            live = [(t, v) for t, v in completes if t not in lost and t not in cancelled]
            if live:
                results.update((r.token, r) for r in client.complete_many(live))
            live_fails = [f for f in fails if f[0] not in lost and f[0] not in cancelled]
            if live_fails:
                results.update((r.token, r) for r in client.fail_many(live_fails))
            out = []
            for job, row in zip(jobs, rows, strict=True):
                answer = results.get(job.token)
                if job.token in cancelled or (answer is not None and answer.status == CANCELLED):
                    row = (*row[:1], CANCELLED, *row[2:])  # (its result or error: not recorded)
                elif answer is None or not answer.ok:  # the lease was lost: another worker has it
                    row = (*row[:1], "lost", *row[2:])
                elif row[1] == "failed" and answer.status == "dead":
                    row = (*row[:1], "dead", *row[2:])
                out.append(row)
            return out

        def claim_next() -> Future[list[ClaimedJob]] | None:
            want = budget()
            return pool.submit(claim, want) if want else None

        upcoming = claim_next()
        finishing: Future[list[tuple[Any, ...]]] | None = None
        while upcoming is not None:
            jobs = upcoming.result()
            if not jobs:  # the queue stayed empty for idle_s
                break
            claimed += len(jobs)
            upcoming = claim_next()
            rows, completes, fails = _run_batch(fn, jobs, worker, cfg.retry_in_s, hb.cancelled)
            hb.remove(j.token for j in jobs)  # done with them: stop extending
            previous, finishing = finishing, pool.submit(settle, jobs, rows, completes, fails)
            if previous is not None:
                yield previous.result()
        if finishing is not None:
            yield finishing.result()


def process(fn: Callable[[Any], Any], *, broker: str, queue: str, token: str | None = None,
            batch_size: int = 16, lease_s: float = 60.0, idle_s: float = 5.0,
            max_jobs: int | None = None, max_seconds: float | None = None,
            retry_in_s: float | None = None, worker_prefix: str = "spark",
            wait_for_queue: bool = False) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A ``mapInPandas`` function whose every task processes jobs with ``fn``.

    A queue that does not exist fails every task at its first claim with
    ``UnknownQueue`` naming it (a mistyped name must not idle for ever);
    ``wait_for_queue=True`` is for workers started before their producers: a
    missing queue then counts as an empty one (each claim waits ``idle_s``).

    ``fn`` takes a payload (decoded JSON) and returns something JSON can
    encode. Use with ``df.mapInPandas(process(fn, ...), RESULT_SCHEMA)``;
    ``status`` is completed, failed (will be retried), dead (attempts
    exhausted), lost (the lease ran out while ``fn`` ran; another worker
    will do it) or cancelled (the job was cancelled while this worker held
    it: nothing was recorded for it, and ``fn`` was not started on it if the
    worker learnt of the cancel first).
    """
    if not callable(fn):
        raise InvalidRequest("process() needs a callable fn(payload)")
    if not 1 <= batch_size <= MAX_CLAIM_JOBS or not 0 < lease_s <= MAX_LEASE_S or idle_s < 0:
        raise InvalidRequest(f"batch_size must be within [1, {MAX_CLAIM_JOBS}], lease_s within "
                             f"(0, {MAX_LEASE_S:g}] and idle_s >= 0")
    cfg = ProcessConfig(broker, queue, token, batch_size, lease_s, idle_s, max_jobs,
                        max_seconds, retry_in_s, worker_prefix, wait_for_queue)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        for _ in batches:  # the input only decides how many workers run
            pass
        yielded = False
        for rows in _settled_batches(fn, cfg):  # one frame per claimed batch (<= 10,000)
            frame = pd.DataFrame(rows, columns=RESULT_COLUMNS)
            for column in ("started", "finished"):  # whole microseconds, as Spark has them
                micros = (frame[column].to_numpy(dtype="float64") * 1e6).round()
                frame[column] = pd.to_datetime(micros.astype("int64"), unit="us", utc=True)
            yielded = True
            yield frame
        if not yielded:
            yield pd.DataFrame([], columns=RESULT_COLUMNS)

    return run


class JobContext:
    """What ``claim_one`` yields: the job, and a place for its result."""

    def __init__(self, job: ClaimedJob) -> None:
        self.job = job
        self.result: Any = None

    @property
    def payload(self) -> Any:
        return self.job.payload


@contextlib.contextmanager
def claim_one(client: QueueClient, worker: str, *, lease_s: float = 60.0,
              wait_s: float = 0.0, wait_for_queue: bool = False) -> Iterator[JobContext | None]:
    """Claim one job and hold its lease while the block runs.

    Yields None when no job came within ``wait_s``; raises ``UnknownQueue`` for
    a queue that does not exist, unless ``wait_for_queue`` (see
    :meth:`QueueClient.claim`). On a normal exit the job
    is completed with ``ctx.result``; on an exception it is failed with the
    error text and the exception propagates::

        with claim_one(client, "me", wait_s=10) as ctx:
            if ctx is not None:
                ctx.result = handle(ctx.payload)
    """
    jobs = client.claim(worker, 1, lease_s, wait_s, wait_for_queue=wait_for_queue)
    if not jobs:
        yield None
        return
    ctx = JobContext(jobs[0])
    with Heartbeater(client, lease_s) as hb:
        hb.add([ctx.job.token])
        try:
            yield ctx
        except BaseException as exc:
            hb.remove([ctx.job.token])
            client.fail(ctx.job.token, error_text(exc))
            raise
        hb.remove([ctx.job.token])
    client.complete(ctx.job.token, ctx.result)
