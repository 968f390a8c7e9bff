"""``readStream.format("osqueue")``: a consumer whose offsets are claim numbers.

Each micro-batch claims up to ``maxJobsPerTrigger`` jobs, a driver-side thread
heartbeats them until Spark commits the batch, then they are completed. Jobs
of a query that died come back when their leases expire.

**Triggers, by PySpark version** (what Spark's micro-batch engine calls):

* 4.2 and later (the ``latestOffset(start, limit)`` / ``getDefaultReadLimit`` /
  ``SupportsTriggerAvailableNow`` API): the default read limit is
  ``ReadMaxRows(maxJobsPerTrigger)``, and ``latestOffset`` claims at most the
  limit's ``max_rows``. ``trigger(once=True)`` is refused: Spark passes
  ``ReadAllAvailable`` for it and runs one batch that it never confirms to
  the source, so its jobs could never be completed (each run would deliver
  them again, until ``maxAttempts`` kills them); the query fails at its first
  ``latestOffset``, having claimed nothing, with a message naming
  ``trigger(availableNow=True)``.
  ``trigger(availableNow=True)`` calls :meth:`QueueStreamReader.prepareForTriggerAvailableNow`
  at the start of the query, which takes the number of jobs the queue holds
  (pending or claimed) as the run's budget: micro-batches of at most
  ``maxJobsPerTrigger`` jobs follow until the budget is spent or a claim finds
  the queue empty, then the query stops by itself. Jobs pushed after the start
  are not waited for (some may be taken within the budget: a queue has no
  order to cut at).
* 4.0 and 4.1 (``latestOffset()`` without arguments, no admission control, no
  hook): ``processingTime`` and the default trigger claim ``maxJobsPerTrigger``
  per batch. ``availableNow`` (and ``once``) fall back to Spark's single batch:
  one batch of at most ``maxJobsPerTrigger`` jobs runs and the query stops.
  Spark confirms a batch to its source only when it plans the next one, which
  a single-batch run never does, so the jobs of that batch are NOT completed:
  their leases run out ``leaseS`` seconds after the query stops and they are
  delivered again, to the next run. On 4.0 and 4.1 use ``processingTime`` and
  stop the query when the queue is drained (or run PySpark 4.2+).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from broker.errors import InvalidRequest, UnknownQueue
from broker.limits import MAX_CLAIM_JOBS, MAX_ITEMS
from broker.wire import CANCELLED
from osqueue_spark.datasource.options import StreamReadOptions
from osqueue_spark.datasource.rows import ts_text
from osqueue_spark.heartbeat import Heartbeater

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNowHook
else:
    try:  # PySpark 4.2+
        from pyspark.sql.streaming.datasource import (
            SupportsTriggerAvailableNow as _AvailableNowHook,
        )
    except ImportError:  # PySpark 4.0 / 4.1: Spark never asks; the method stays callable
        class _AvailableNowHook:
            pass

log = logging.getLogger("osqueue.spark")

STREAM_SCHEMA = "id string, payload string, attempt int, lease_expires_at timestamp"


def default_read_limit(max_rows: int) -> Any:
    """``ReadMaxRows(max_rows)`` on PySpark 4.2+, else None (no ``ReadLimit`` classes)."""
    try:
        from pyspark.sql.streaming.datasource import ReadMaxRows
    except ImportError:
        return None
    return ReadMaxRows(max_rows)


#: Why ``trigger(once=True)`` is refused (see the module docstring).
ONCE_REFUSED = (
    "readStream.format(\"osqueue\") does not support trigger(once=True): Spark runs its "
    "single batch without ever confirming it to the source, so the batch's jobs would "
    "never be completed (each run would deliver them again). Use "
    "trigger(availableNow=True), which drains the queue in bounded batches and stops")


def is_read_all_available(limit: Any) -> bool:
    """Whether ``limit`` is ``ReadAllAvailable``: what Spark 4.2+ passes under
    ``trigger(once=True)`` (availableNow and the other triggers get
    :meth:`QueueStreamReader.getDefaultReadLimit`)."""
    return type(limit).__name__ == "ReadAllAvailable"


def rows_allowed(limit: Any, default: int) -> int | None:
    """The most jobs one batch may claim under Spark's ``limit``: None for
    ``ReadAllAvailable``; ``max_rows`` of ``ReadMaxRows``; ``default``
    (``maxJobsPerTrigger``) when Spark passes no limit (PySpark 4.0 / 4.1) or
    one that does not count rows (``ReadMinRows``, ``ReadMaxFiles``,
    ``ReadMaxBytes``: a queue cannot wait for a minimum, nor know sizes before
    it claims)."""
    if limit is None:
        return default
    if is_read_all_available(limit):
        return None
    max_rows = getattr(limit, "max_rows", None)  # ReadMaxRows; not ``maxRows``
    if isinstance(max_rows, int) and max_rows > 0:
        return max_rows
    return default


class QueueStreamReader(DataSourceStreamReader, _AvailableNowHook):
    """A consumer: offsets are claim numbers; jobs are completed when Spark commits.

    The planning copy of the reader lives on the driver (in the Python process
    Spark keeps for the stream) for the life of the query. Every job it
    claims is kept leased by a background :class:`~osqueue_spark.heartbeat.Heartbeater`
    (a beat every ``leaseS / 3`` seconds, each extending the lease to
    ``leaseS`` seconds) from the claim in ``latestOffset`` until the batch is
    completed, however long the batch runs. ``stop()`` (Spark calls it when
    the query stops or fails) ends the heartbeats; so does the end of the
    driver's process. Claimed jobs not yet completed then come back to the
    queue when their leases run out (after at most ``leaseS`` seconds) and are
    delivered again, to this query after a restart or to any other consumer.
    A job whose lease was lost anyway (the broker unreachable for longer than
    ``leaseS``) is logged and dropped from its batch; the broker redelivers
    it. A job cancelled while held (its heartbeat, or its complete, answered
    cancelled) is logged and dropped from its batch, or left uncompleted if
    Spark already read it; the broker has ended it as cancelled. The copy
    pickled for executors carries only the options: no client, no thread, no
    claimed jobs.

    Spark calls ``commit(end)`` for a batch only when it plans the next one,
    so an idle stream would hold its last batch forever. ``latestOffset`` is
    called only after the previous batch reached the sink's commit log, so it
    completes every batch already planned by ``partitions`` first.
    """

    def __init__(self, opts: StreamReadOptions) -> None:
        self.opts = opts
        self._batches: dict[int, list[Any]] = {}
        self._last = 0
        self._planned = 0
        self._budget: int | None = None  # jobs an availableNow run may still claim
        self._client: Any = None
        self._hb: Heartbeater | None = None
        self._lock = threading.Lock()

    # The planning copy on the driver holds the connection, heartbeat thread and
    # claimed jobs; the copy pickled for executors needs only the partitions.
    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    def _connect(self) -> Any:
        if self._client is None:
            self._client = self.opts.target.client()
        return self._client

    def _heartbeater(self) -> Heartbeater:
        """The driver's heartbeat thread, started with the first claim."""
        if self._hb is None:
            self._hb = Heartbeater(self._connect(), self.opts.lease_s)
        return self._hb

    def _drop_lost(self) -> None:
        """Forget jobs whose lease the heartbeat found lost (the broker has taken
        them back, and completing them would only be refused) or that were
        cancelled (the broker has ended them: nothing to complete)."""
        hb = self._hb
        if hb is None:
            return
        lost, cancelled = hb.take_lost(), hb.take_cancelled()
        if not lost and not cancelled:
            return
        with self._lock:
            dropped = ended = 0
            for offset, jobs in self._batches.items():
                kept = [j for j in jobs if j.token not in lost and j.token not in cancelled]
                ended += sum(j.token in cancelled for j in jobs)
                dropped += len(jobs) - len(kept)
                self._batches[offset] = kept
        if dropped - ended:
            log.warning("%d claimed job(s) lost their lease before Spark committed them; "
                        "they will be delivered again", dropped - ended)
        if ended:
            log.warning("%d claimed job(s) were cancelled before Spark committed them; "
                        "they are not completed", ended)

    def initialOffset(self) -> dict[str, int]:
        return {"claim": 0}

    def getDefaultReadLimit(self) -> Any:
        """``ReadMaxRows(maxJobsPerTrigger)`` (PySpark 4.2+ asks for it)."""
        return default_read_limit(self.opts.max_jobs_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)`` (PySpark 4.2+): drain what the queue holds now.

        The run's budget is the number of jobs the queue holds at this moment,
        pending or claimed: delayed jobs are not claimable yet, and jobs held
        by a live consumer may never come back, but a claim that finds nothing
        ends the run anyway; counting claimed ones lets the run take the jobs
        of a consumer that died (the previous run of this query, say) once
        their leases run out during it. Batches claim until the budget is spent
        or a claim finds nothing, so the run stops even while producers keep
        pushing. Raises ``OsqueueError`` if the broker is unreachable, and
        ``UnknownQueue`` if the queue does not exist (unless ``waitForQueue``:
        then the run has nothing to drain); the query fails to start, nothing
        claimed.
        """
        try:
            counts = self._connect().stats().get("counts", {})
        except UnknownQueue:
            if not self.opts.wait_for_queue:
                raise
            counts = {}  # not pushed to yet, as waitForQueue allows: nothing to drain
        self._budget = int(counts.get("pending", 0)) + int(counts.get("claimed", 0))
        log.info("osqueue availableNow run: at most %d job(s), %d per batch",
                 self._budget, self.opts.max_jobs_per_trigger)

    def latestOffset(self, start: dict[str, int] | None = None,
                     limit: Any = None) -> dict[str, int]:
        """Complete every batch planned so far, then claim the next one.

        ``limit`` is Spark's ``ReadLimit`` (4.2+; see :func:`rows_allowed`);
        PySpark 4.0 and 4.1 call this without arguments. Returns the offset
        Spark passed in (no new batch) when nothing was claimed, which ends an
        availableNow run. Raises ``InvalidRequest`` (claiming nothing) for
        ``ReadAllAvailable``, i.e. ``trigger(once=True)``: see :data:`ONCE_REFUSED`.
        """
        if is_read_all_available(limit):
            raise InvalidRequest(ONCE_REFUSED)
        self._complete_through(self._planned)
        self._drop_lost()
        if start is not None:
            self._last = max(self._last, int(start.get("claim", 0)))
        want = rows_allowed(limit, self.opts.max_jobs_per_trigger)
        if self._budget is not None:
            want = self._budget if want is None else min(want, self._budget)
        jobs = self._claim(want)
        if self._budget is not None:
            self._budget -= len(jobs)
        if not jobs:
            return {"claim": self._last}
        offset = max(self._last + 1, time.time_ns() // 1000)  # grows across restarts too
        with self._lock:
            self._batches[offset] = jobs
        self._last = offset
        return {"claim": offset}

    def _claim(self, want: int | None) -> list[Any]:
        """Claim up to ``want`` jobs (None: every ready one), at most
        ``MAX_CLAIM_JOBS`` per request; each request's jobs are heartbeated
        from the moment it answers until they are completed."""
        client = self._connect()
        jobs: list[Any] = []
        while want is None or len(jobs) < want:
            ask = MAX_CLAIM_JOBS if want is None else min(MAX_CLAIM_JOBS, want - len(jobs))
            got = client.claim(self.opts.worker, ask, self.opts.lease_s,
                               wait_for_queue=self.opts.wait_for_queue)
            if got:
                self._heartbeater().add(j.token for j in got)
                jobs.extend(got)
            if len(got) < ask:
                break
        return jobs

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        lo, hi = int(start.get("claim", 0)), int(end.get("claim", 0))
        self._last = max(self._last, hi)
        self._planned = max(self._planned, hi)
        with self._lock:
            rows = [
                (j.id, orjson.dumps(j.payload).decode(), j.attempt, j.lease_expires_at)
                for offset, jobs in sorted(self._batches.items()) if lo < offset <= hi
                for j in jobs
            ]
        size = self.opts.rows_per_partition
        return [InputPartition(rows[i:i + size]) for i in range(0, len(rows), size)] or [
            InputPartition([])]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        rows = None if partition is None else partition.value  # None: PySpark 4.0/4.1's empty plan
        for job_id, payload, attempt, expires in rows or ():
            yield job_id, payload, attempt, ts_text(expires)

    def commit(self, end: dict[str, int]) -> None:
        self._complete_through(int(end.get("claim", 0)))

    def _complete_through(self, hi: int) -> None:
        """Complete the jobs of every batch up to offset ``hi``; their heartbeats stop
        once the broker has answered. Raises ``OsqueueError`` if the broker stays
        unreachable (the jobs stay held and heartbeated; a later call retries)."""
        with self._lock:
            done = sorted(o for o in self._batches if o <= hi)
            jobs = [j for o in done for j in self._batches[o]]
        if not jobs:
            with self._lock:
                for o in done:
                    self._batches.pop(o, None)
            return
        client = self._connect()
        tokens = [j.token for j in jobs]
        hb = self._hb
        results: list[Any] = []
        settled: set[str] = set()
        try:
            with hb.paused() if hb is not None else contextlib.nullcontext():
                for i in range(0, len(tokens), MAX_ITEMS):
                    chunk = tokens[i:i + MAX_ITEMS]
                    results.extend(client.complete_many([(t, None) for t in chunk]))
                    settled.update(chunk)
                    if hb is not None:
                        hb.remove(chunk)
        finally:  # forget what the broker answered for, even if a later chunk failed
            with self._lock:
                for o in done:
                    kept = [j for j in self._batches.get(o, ()) if j.token not in settled]
                    if kept:
                        self._batches[o] = kept
                    else:
                        self._batches.pop(o, None)
        stale = [r.token for r in results if not r.ok and r.status != CANCELLED]
        if stale:
            log.warning("%d job(s) of a committed batch had lost their lease and will be "
                        "delivered again", len(stale))
        cancelled = [r.token for r in results if not r.ok and r.status == CANCELLED]
        if cancelled:
            log.warning("%d job(s) of a committed batch had been cancelled; they were not "
                        "completed (nothing recorded for them)", len(cancelled))

    def stop(self) -> None:
        """End the heartbeats and close the connection. Jobs still held (claimed,
        not committed) return to the queue when their leases run out."""
        if self._hb is not None:
            self._hb.stop()
            self._hb = None
        if self._client is not None:
            self._client.close()
            self._client = None
