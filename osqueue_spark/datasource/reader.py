"""Batch reads of ``format("osqueue")``: the queue object and the archive, straight
from storage (no broker).

* ``table=queue`` (default): one row per job of the queue object (a queue
  whose object refers to segments is refused, until they are read too:
  issue 20 step 4);
* ``table=archive``: completed jobs, one partition per ``objectsPerPartition``
  archive objects, pruned by ``since``/``until`` and, with
  ``spark.sql.python.filterPushdown.enabled`` and ``filterPushdown=true``
  (Spark 4.1+), by pushed filters on ``completed_at`` and ``status``.

``payloadSchema`` (DDL) adds the payload's fields as columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pyspark.sql.datasource import DataSourceReader, InputPartition

from broker import paths, timefmt
from broker.errors import NotFound, StateError
from broker.model import archive
from broker.model.decode import decode_state
from broker.storage import store_from_url
from osqueue_spark.datasource.errors import with_code
from osqueue_spark.datasource.options import ReadOptions
from osqueue_spark.datasource.rows import ts, ts_text

QUEUE_SCHEMA = (
    "id string, seq long, status string, priority int, payload string, attempts int, "
    "max_attempts int, created_at timestamp, run_at timestamp, worker string, "
    "lease_expires_at timestamp, last_error string"
)
ARCHIVE_SCHEMA = (
    "id string, seq long, status string, priority int, payload string, attempts int, "
    "max_attempts int, created_at timestamp, run_at timestamp, completed_at timestamp, "
    "worker string, result string, last_error string, token string, commit_seq long"
)


def _payload_fields(schema: Any, base: int) -> list[str]:
    return [f.name for f in schema.fields[base:]]


def _extract(payload: Any, names: list[str]) -> tuple[Any, ...]:
    if not names:
        return ()
    if not isinstance(payload, dict):
        return (None,) * len(names)
    return tuple(payload.get(n) for n in names)


class QueueReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: Any) -> None:
        self.opts = opts
        self.extra = _payload_fields(schema, len(QUEUE_SCHEMA.split(",")))

    @with_code
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        store = store_from_url(self.opts.store)
        try:
            data = store.read(paths.state_key(self.opts.queue)).data
        except Exception as exc:

            if isinstance(exc, NotFound):
                return
            raise
        where = f"{store.url}/{paths.state_key(self.opts.queue)}"
        state = decode_state(data, where=where)
        if state.segment_refs:  # (never skip their jobs silently)
            raise StateError(
                f"{where}: this queue has segments ({len(state.segment_refs)} objects of "
                "pending jobs apart from the queue object); reading them needs issue 20 "
                "step 4, not in this osqueue")
        for job in state.jobs.values():
            lease = job.lease
            payload = orjson.loads(job.payload) if self.extra else None
            yield (
                job.id, job.seq, job.status, job.priority, job.payload.decode(), job.attempts,
                job.max_attempts, ts(job.created_ms), ts(job.run_at_ms),
                lease.worker if lease else None, ts(lease.expires_ms) if lease else None,
                job.last_error, *_extract(payload, self.extra),
            )


@dataclass(frozen=True)
class ArchivePart:
    keys: tuple[str, ...]
    legacy: bool = False  # objects of osqueue 0.1: keep the latest completion per job


class ArchiveReader(DataSourceReader):
    """Completed jobs from the archive objects, pruned by hour before reading.

    Each completed job is one row (see :mod:`broker.model.archive`): objects written
    by this version hold each job once; objects of osqueue 0.1 (which may hold
    orphans) are read together in one partition that keeps the latest
    completion of each job.
    """

    def __init__(self, opts: ReadOptions, schema: Any) -> None:
        self.opts = opts
        self.extra = _payload_fields(schema, len(ARCHIVE_SCHEMA.split(",")))
        self.since_ms = opts.since_ms
        self.until_ms = opts.until_ms
        self.status: str | None = None

    @with_code
    def partitions(self) -> Sequence[InputPartition]:
        store = store_from_url(self.opts.store)
        start = paths.archive_hour(self.since_ms) if self.since_ms is not None else None
        end = paths.archive_hour(self.until_ms) if self.until_ms is not None else None
        objects = archive.list_objects(store, self.opts.queue, start, end)
        if self.status is not None and self.status != "completed":
            objects = []
        n = self.opts.objects_per_partition
        legacy = [k for k in objects if archive.is_legacy(k)]
        current = [k for k in objects if not archive.is_legacy(k)]
        parts = [InputPartition(ArchivePart(tuple(current[i:i + n])))
                 for i in range(0, len(current), n)]
        if legacy:
            parts.append(InputPartition(ArchivePart(tuple(legacy), legacy=True)))
        return parts

    @with_code
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        store = store_from_url(self.opts.store)
        # Spark reads one empty partition when none were planned: PySpark 4.2+ passes
        # it as InputPartition(None), 4.0 and 4.1 as a bare None.
        part: ArchivePart | None = None if partition is None else partition.value
        if part is None:
            return
        lines: Iterable[tuple[dict[str, Any], bytes, bytes]] = (
            line for key in part.keys for line in archive.records_verbatim(store.get(key)))
        if part.legacy:
            lines = archive.latest_per_job(lines, lambda line: line[0])
        for rec, payload, result in lines:  # payload and result as written
            done = timefmt.parse(rec["completed_at"])
            if self.since_ms is not None and done < self.since_ms:
                continue
            if self.until_ms is not None and done > self.until_ms:
                continue
            yield (
                rec["id"], rec["seq"], rec["status"], rec["priority"], payload.decode(),
                rec["attempts"], rec["max_attempts"],
                ts_text(rec["created_at"]), ts_text(rec["run_at"]), ts(done),
                rec.get("worker"), None if rec.get("result") is None else result.decode(),
                rec.get("last_error"), rec.get("token"), rec.get("commit_seq"),
                *_extract(rec["payload"], self.extra),
            )


class ArchivePushdownReader(ArchiveReader):
    """ArchiveReader that also takes pushed filters (Spark 4.1+, conf enabled)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        from pyspark.sql.datasource import (
            EqualTo,
            GreaterThan,
            GreaterThanOrEqual,
            LessThan,
            LessThanOrEqual,
        )

        for f in filters:
            column = f.attribute[0] if len(f.attribute) == 1 else None
            if column == "completed_at" and isinstance(
                    f, GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
                ms = round(f.value.timestamp() * 1000)
                if isinstance(f, GreaterThan | GreaterThanOrEqual):
                    self.since_ms = ms if self.since_ms is None else max(self.since_ms, ms)
                else:
                    self.until_ms = ms if self.until_ms is None else min(self.until_ms, ms)
                yield f  # exact bounds are re-checked by Spark; hours are pruned here
            elif column == "status" and isinstance(f, EqualTo):
                self.status = str(f.value)
                yield f
            else:
                yield f
