"""``readStream.format("osqueue")``: a consumer whose offsets are claim numbers.

Each micro-batch claims up to ``maxJobsPerTrigger`` jobs, a driver-side thread
heartbeats them until Spark commits the batch, then they are completed. Jobs
of a query that died come back when their leases expire.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from osqueue_spark.heartbeat import Heartbeater
from osqueue_spark.options import StreamReadOptions
from osqueue_spark.rows import ts_text

log = logging.getLogger("osqueue.spark")

STREAM_SCHEMA = "id string, payload string, attempt int, lease_expires_at timestamp"


class QueueStreamReader(DataSourceStreamReader):
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
    it. The copy pickled for executors carries only the options: no client,
    no thread, no claimed jobs.

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
        """Forget jobs whose lease the heartbeat found lost: the broker has taken
        them back, and completing them would only be refused."""
        lost = self._hb.take_lost() if self._hb is not None else set()
        if not lost:
            return
        with self._lock:
            dropped = 0
            for offset, jobs in self._batches.items():
                kept = [j for j in jobs if j.token not in lost]
                dropped += len(jobs) - len(kept)
                self._batches[offset] = kept
        if dropped:
            log.warning("%d claimed job(s) lost their lease before Spark committed them; "
                        "they will be delivered again", dropped)

    def initialOffset(self) -> dict[str, int]:
        return {"claim": 0}

    def latestOffset(self, start: dict[str, int] | None = None,
                     limit: Any = None) -> dict[str, int]:
        client = self._connect()
        self._complete_through(self._planned)
        self._drop_lost()
        if start is not None:
            self._last = max(self._last, int(start.get("claim", 0)))
        want = self.opts.max_jobs_per_trigger
        max_rows = getattr(limit, "maxRows", None)
        if isinstance(max_rows, int) and max_rows > 0:
            want = min(want, max_rows)
        jobs = client.claim(self.opts.worker, want, self.opts.lease_s)
        if not jobs:
            return {"claim": self._last}
        self._heartbeater().add(j.token for j in jobs)  # held from now until completed
        offset = max(self._last + 1, time.time_ns() // 1000)  # grows across restarts too
        with self._lock:
            self._batches[offset] = jobs
        self._last = offset
        return {"claim": offset}

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
        size = 500
        return [InputPartition(rows[i:i + size]) for i in range(0, len(rows), size)] or [
            InputPartition([])]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for job_id, payload, attempt, expires in partition.value or ():
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
        with hb.paused() if hb is not None else contextlib.nullcontext():
            results = client.complete_many([(t, None) for t in tokens])
            if hb is not None:
                hb.remove(tokens)
        with self._lock:
            for o in done:
                self._batches.pop(o, None)
        stale = [r.token for r in results if not r.ok]
        if stale:
            log.warning("%d job(s) of a committed batch had lost their lease and will be "
                        "delivered again", len(stale))

    def stop(self) -> None:
        """End the heartbeats and close the connection. Jobs still held (claimed,
        not committed) return to the queue when their leases run out."""
        if self._hb is not None:
            self._hb.stop()
            self._hb = None
        if self._client is not None:
            self._client.close()
            self._client = None
