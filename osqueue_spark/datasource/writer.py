"""Batch writes of ``format("osqueue")``: staged per task, published once by the driver.

Each task stages its jobs under its own write id; the driver's ``commit``
publishes the staged jobs of the successful attempts in one broker operation
(once-keyed by the write) and drops the rest; ``abort`` drops everything;
staged jobs of a writer that vanished expire. The staging helpers here serve
the stream writer (:mod:`osqueue_spark.datasource.stream_writer`) too.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from osqueue_spark.client import job_staged_line
from osqueue_spark.datasource.errors import with_code
from osqueue_spark.datasource.options import BrokerOptions
from osqueue_spark.datasource.rows import arrow_staged_lines, row_to_job

log = logging.getLogger("osqueue.spark")


@dataclass
class StagedMessage(WriterCommitMessage):
    """What a write task staged. ``query_id``: the streaming query's id when the
    task knew it; ``fingerprint``: with ``fingerprint=True`` staging, the sum
    (mod 2**128) of the 128-bit BLAKE2b digests of the staged lines, a digest of
    the task's jobs that ignores their order and adds up across tasks."""

    write_ids: list[str]
    rows: int
    query_id: str | None = None
    fingerprint: int = 0


STAGE_CHUNK_BYTES = 8 * 1024 * 1024  # well under the broker's request limit
FINGERPRINT_MASK = (1 << 128) - 1


def stage_lines(opts: BrokerOptions, prefix: str, lines: Iterator[bytes], *,
                 fingerprint: bool = False) -> StagedMessage:
    """Stage staged lines under ``prefix``, one write id per chunk of ``batch_size``
    rows (or 8 MB, whichever comes first). With ``fingerprint``, also digest the
    lines (see :class:`StagedMessage`)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task = f"p{ctx.partitionId()}-t{ctx.taskAttemptId()}" if ctx is not None else "driver"
    client = opts.client()
    write_ids: list[str] = []
    chunk: list[bytes] = []
    size = count = total = 0
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes

    def flush() -> None:
        write_id = f"{prefix}{task}-c{len(write_ids)}"
        client.stage_lines(write_id, b"".join(chunk))
        write_ids.append(write_id)

    for line in lines:
        chunk.append(line)
        size += len(line)
        if fingerprint:
            total += from_bytes(blake2b(line, digest_size=16).digest(), "big")
        if len(chunk) >= opts.batch_size or size >= STAGE_CHUNK_BYTES:
            flush()
            count += len(chunk)
            chunk, size = [], 0
    if chunk:
        flush()
        count += len(chunk)
    client.close()
    return StagedMessage(write_ids, count, fingerprint=total & FINGERPRINT_MASK)


def stage_rows(opts: BrokerOptions, prefix: str, rows: Iterator[Any], *,
                fingerprint: bool = False) -> StagedMessage:
    return stage_lines(opts, prefix, (job_staged_line(row_to_job(row)) for row in rows),
                        fingerprint=fingerprint)


class QueueWriter(DataSourceArrowWriter):
    """Receives Arrow record batches: payload text goes through without a parse."""

    def __init__(self, opts: BrokerOptions, write_uuid: str) -> None:
        self.opts = opts
        self.prefix = f"w-{write_uuid}/"  # one write: every task's chunks live under it

    @with_code
    def write(self, iterator: Iterator[Any]) -> StagedMessage:
        return stage_lines(self.opts, self.prefix, arrow_staged_lines(iterator))

    @with_code
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        keep = [w for m in messages if isinstance(m, StagedMessage) for w in m.write_ids]
        out = self.opts.client().publish(self.prefix, keep, once=f"write:{self.prefix}")
        log.info("osqueue write %s: published %d jobs, discarded %d chunk(s) of failed attempts",
                 self.prefix, out["published"], out["discarded"])

    @with_code
    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        out = self.opts.client().publish(self.prefix, [])
        log.warning("osqueue write %s aborted: discarded %d staged jobs", self.prefix,
                    out["discarded"])
