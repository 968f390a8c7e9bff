"""``push_partition``: a ``df.foreachPartition`` sink with deterministic idempotency keys.

A row's key is ``{key_prefix}:{partition}:{digest}:{k}`` (or the row's own
``key`` column): ``digest`` is a 64-bit BLAKE2b digest of the job's
canonical content (its staged line: payload JSON and options, see
:func:`osqueue_spark.client.job_staged_line`) and ``k`` counts the earlier rows of
the partition with the same content. The key does not depend on where a row
sits in the partition, so a retried task that sees its rows in another order
(as after a shuffle) pushes the same keys, and the broker's dedup window turns
what the failed attempt already pushed into no-ops. ``k`` keeps identical rows
apart: two equal rows are two jobs, and the k-th copy keeps its key whatever
the order.

The prefix is fixed when ``push_partition`` is called, on the driver: call it
once per logical write (a second call makes a second, independent write).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from osqueue_spark.client import QueueClient, job_staged_line
from osqueue_spark.datasource.rows import row_to_job


def content_keys(rows: Iterable[Any], prefix: str,
                 group_column: str | None = None) -> Iterator[dict[str, Any]]:
    """Jobs (as for :meth:`QueueClient.push_many`) from ``rows``, each keyed by its
    content and occurrence number (see the module docstring); a row's own ``key``
    column wins. ``group_column``: the string column whose value is each row's
    group (as ``groupColumn`` of ``df.write``; it stays in the payload).

    Memory: one entry (under 100 bytes) per distinct content, for as long as the
    iteration runs. Raises ``InvalidRequest`` for a row that cannot be a job
    (bad payload JSON, a value JSON cannot hold).
    """
    # 64 bits keep keys short (the queue object holds the key window). Two contents
    # with one digest still get two keys (k counts them together); only a retry
    # that reorders them after a partial attempt could swap them: odds ~n**2/2**65.
    seen: dict[bytes, int] = {}
    blake2b = hashlib.blake2b
    for row in rows:
        job = row_to_job(row, group_column)
        if job.get("key") is None:
            digest = blake2b(job_staged_line(job), digest_size=8).digest()
            k = seen.get(digest, 0)
            seen[digest] = k + 1
            job["key"] = f"{prefix}:{digest.hex()}:{k}"
        yield job


def push_partition(*, broker: str, queue: str, token: str | None = None,
                   key_prefix: str | None = None, batch_size: int = 1000,
                   group_column: str | None = None) -> Callable[[Iterable[Any]], None]:
    """A function for ``df.foreachPartition`` that pushes every row as a job.

    Rows map to jobs as in ``df.write.format("osqueue")``: a ``payload``
    column (JSON string, struct or map) or all columns as a JSON object, and
    optional ``priority``, ``delay_s``, ``max_attempts``, ``key`` columns.
    ``key_prefix`` (default: random, fixed by this call) names the write;
    ``batch_size`` is rows per push request; ``group_column`` names the string
    column whose value is each row's group (``groupColumn`` of ``df.write``;
    null: no group; a value that is not a group name fails the task naming it).

    Retries do not duplicate jobs: keys are stable per (partition id, row
    content, occurrence), so any order of the same rows gives the same keys.
    This relies on the queue's idempotency window, the queue settings
    ``dedup_ttl_s`` (default 86,400 s) and ``dedup_keys`` (default 200,000
    most recent keys, across all pushes to the queue). A retry that comes
    after its keys left the window (later than ``dedup_ttl_s``, or after more
    than ``dedup_keys`` newer keys were pushed, e.g. by a write of more rows
    than that) enqueues the rows again: size ``dedup_keys`` above the rows of
    the largest write (``QueueClient.create(dedup_keys=...)``). The input must
    be deterministic per partition (the same rows in each attempt, in any
    order): a retry over different rows pushes different jobs. Use
    ``df.write.format("osqueue")`` for exactly-once without these limits.

    Failure modes: a row that cannot be a job raises ``InvalidRequest``
    (batches pushed before it stay pushed; a retry of the task pushes nothing
    twice but fails on the same row); broker errors that outlast the client's
    retries (60 s) raise ``OsqueueError``. Memory: about 100 bytes per
    distinct row content of the partition, held while the function runs.
    """
    prefix = key_prefix or f"fp-{uuid.uuid4().hex[:12]}"

    def push(rows: Iterable[Any]) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        client = QueueClient(broker, queue, token=token)
        try:
            client.push_many(content_keys(rows, f"{prefix}:{part}", group_column),
                             batch_size=batch_size)
        finally:
            client.close()

    return push
