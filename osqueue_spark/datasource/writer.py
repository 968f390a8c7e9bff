"""Batch writes of ``format("osqueue")``: staged per task, published once by the driver.

Each task stages its jobs under its own write id; the driver's ``commit``
publishes the staged jobs of the successful attempts in one broker operation
(once-keyed by the write) and drops the rest; ``abort`` drops everything;
staged jobs of a writer that vanished expire. The staging helpers here serve
the stream writer (:mod:`osqueue_spark.datasource.stream_writer`) too.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from broker.errors import RequestError
from osqueue_spark.client import job_staged_line
from osqueue_spark.datasource.errors import with_code
from osqueue_spark.datasource.options import BrokerOptions
from osqueue_spark.datasource.rows import arrow_staged_chunks, row_to_job

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
#: Stage requests one task has under way while it makes the next chunk: the
#: broker's check and durable write of one chunk overlap the others'
#: (``bench/spark_bench.py``, the write row).
STAGE_IN_FLIGHT = 2
FINGERPRINT_MASK = (1 << 128) - 1


def stage_lines(opts: BrokerOptions, prefix: str, lines: Iterator[bytes], *,
                fingerprint: bool = False) -> StagedMessage:
    """Stage staged lines under ``prefix`` (see :func:`stage_pieces`). With
    ``fingerprint``, also digest the lines (see :class:`StagedMessage`)."""
    total = 0
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes

    def pieces() -> Iterator[tuple[bytes, int]]:
        nonlocal total
        for line in lines:
            if fingerprint:
                total += from_bytes(blake2b(line, digest_size=16).digest(), "big")
            yield line, 1

    message = stage_pieces(opts, prefix, pieces())
    message.fingerprint = total & FINGERPRINT_MASK
    return message


def stage_pieces(opts: BrokerOptions, prefix: str,
                 pieces: Iterator[tuple[bytes, int]]) -> StagedMessage:
    """Stage ``pieces`` (staged lines and how many, in order) under ``prefix``,
    one write id per request of at most ``batch_size`` rows and
    :data:`STAGE_CHUNK_BYTES` (but for one larger piece).

    One request is sent while the next is built (a thread of this task), so
    the broker's check and write of a chunk overlap the making of the next:
    at most two chunks are held. The first failed request raises here (from
    the next piece's turn or the end); what was staged stays until the
    write's publish or abort drops it, or it expires.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task = f"p{ctx.partitionId()}-t{ctx.taskAttemptId()}" if ctx is not None else "driver"
    client = opts.client()
    write_ids: list[str] = []
    chunk: list[bytes] = []
    size = rows = count = 0
    sending: collections.deque[Future[int]] = collections.deque()

    def send(write_id: str, data: bytes, first: int, n: int) -> int:
        try:
            return client.stage_lines(write_id, data)
        except RequestError as exc:  # (the broker names the line within the request)
            raise type(exc)(f"rows {first}-{first + n - 1} of task {task} were refused, "
                            f"nothing of them staged: {exc}", **exc.details) from None

    with contextlib.closing(client), ThreadPoolExecutor(
            STAGE_IN_FLIGHT, thread_name_prefix="osqueue-stage") as sender:

        def flush() -> None:
            nonlocal chunk, size, rows, count
            while len(sending) >= STAGE_IN_FLIGHT:
                sending.popleft().result()  # (raises the failure of a request before)
            write_id = f"{prefix}{task}-c{len(write_ids)}"
            sending.append(sender.submit(send, write_id, b"".join(chunk), count, rows))
            write_ids.append(write_id)
            count += rows
            chunk, size, rows = [], 0, 0

        for data, n in pieces:
            if chunk and (rows + n > opts.batch_size or size + len(data) > STAGE_CHUNK_BYTES):
                flush()
            chunk.append(data)
            size += len(data)
            rows += n
        if chunk:
            flush()
        while sending:
            sending.popleft().result()
    return StagedMessage(write_ids, count)


def stage_rows(opts: BrokerOptions, prefix: str, rows: Iterator[Any], *,
                fingerprint: bool = False) -> StagedMessage:
    column = opts.group_column
    return stage_lines(opts, prefix, (job_staged_line(row_to_job(row, column)) for row in rows),
                        fingerprint=fingerprint)


class QueueWriter(DataSourceArrowWriter):
    """Receives Arrow record batches: payload text goes through without a parse."""

    def __init__(self, opts: BrokerOptions, write_uuid: str) -> None:
        self.opts = opts
        self.prefix = f"w-{write_uuid}/"  # one write: every task's chunks live under it

    @with_code
    def write(self, iterator: Iterator[Any]) -> StagedMessage:
        return stage_pieces(self.opts, self.prefix, arrow_staged_chunks(
            iterator, self.opts.batch_size, STAGE_CHUNK_BYTES, self.opts.group_column))

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
