"""``push_partition``: a ``df.foreachPartition`` sink with deterministic idempotency keys.

Each row's key is ``{key_prefix}:{partition}:{row index}`` (or the row's own
``key`` column), so a retried task pushes the same keys and the broker's
dedup window turns the retry into a no-op. The prefix is fixed when
``push_partition`` is called, on the driver: call it once per logical write.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from osqueue_spark.client import QueueClient
from osqueue_spark.rows import row_to_job


def push_partition(*, broker: str, queue: str, token: str | None = None,
                   key_prefix: str | None = None,
                   batch_size: int = 1000) -> Callable[[Iterable[Any]], None]:
    """A function for ``df.foreachPartition`` that pushes every row as a job.

    Rows map to jobs as in ``df.write.format("osqueue")``: a ``payload``
    column (JSON string, struct or map) or all columns as a JSON object, and
    optional ``priority``, ``delay_s``, ``max_attempts``, ``key`` columns.
    """
    prefix = key_prefix or f"fp-{uuid.uuid4().hex[:12]}"

    def push(rows: Iterable[Any]) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        client = QueueClient(broker, queue, token=token)

        def jobs() -> Iterator[dict[str, Any]]:
            for n, row in enumerate(rows):
                job = row_to_job(row)
                job.setdefault("key", f"{prefix}:{part}:{n}")
                yield job

        client.push_many(jobs(), batch_size=batch_size)
        client.close()

    return push
