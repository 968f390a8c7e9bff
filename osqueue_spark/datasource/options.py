"""Data source options: strings in, one frozen dataclass out, a clear message per bad option.

Options are parsed once (on the driver, in the data source's constructor) and
the dataclass travels to executors by pickle. Secrets (``token``) are kept out
of ``repr``. A bound the broker also enforces is its name in
:mod:`broker.limits`, so an option the broker would refuse is refused here,
on the driver, before any task runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker import paths, timefmt
from broker.errors import InvalidRequest
from broker.limits import MAX_CLAIM_JOBS, MAX_LEASE_S, MAX_WORKER_CHARS
from osqueue_spark.client import QueueClient

#: Most rows staged in one request of a write (``batchSize``); a chunk also ends
#: at 8 MB (see :mod:`osqueue_spark.datasource.writer`).
MAX_WRITE_BATCH_ROWS = 10_000
#: Rows staged in one request by default. Each staged chunk is one request and
#: one durable store write, so 1M rows staged 1,000 at a time took about 1.5
#: times as long as 5,000 at a time (bench/spark_bench.py --only write
#: --batch-size N, 2 cores); 10,000 gained little more.
DEFAULT_WRITE_BATCH_ROWS = 5_000
#: Longest per-request timeout (s) a client may be given (``timeoutS``).
MAX_TIMEOUT_S = 3600.0
#: Most archive objects one read partition may take (``objectsPerPartition``).
MAX_OBJECTS_PER_PARTITION = 100_000


class OptionError(InvalidRequest):
    """A missing or malformed data source option."""

    code = "bad_option"


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark hands options over case-insensitively; accept any case here too.
    for key, value in options.items():
        if key.lower() == name.lower():
            return value
    return None


def _req(options: Mapping[str, str], name: str, example: str) -> str:
    value = _get(options, name)
    if value is None or not value.strip():
        raise OptionError(f"option '{name}' is required, e.g. .option(\"{name}\", \"{example}\")")
    return value.strip()


def _int(options: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise OptionError(f"option '{name}' must be within [{lo}, {hi}], got {value}")
    return value


def _float(options: Mapping[str, str], name: str, default: float, lo: float,
           hi: float) -> float:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"option '{name}' must be a number, got {raw!r}") from None
    if not lo <= value <= hi:
        raise OptionError(f"option '{name}' must be within [{lo}, {hi}], got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option '{name}' must be true or false, got {raw!r}")


def _choice(options: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (any case); the first when the option is not set."""
    raw = _get(options, name)
    if raw is None:
        return choices[0]
    if raw.strip().lower() not in choices:
        raise OptionError(f"option '{name}' must be one of {', '.join(map(repr, choices))}, "
                          f"got {raw!r}")
    return raw.strip().lower()


def _time(options: Mapping[str, str], name: str) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return None
    text = raw.strip()
    if "T" not in text:
        text += "T00:00:00Z"
    elif not text.endswith("Z") and "+" not in text[10:]:
        text += "Z"
    try:
        return timefmt.parse(text)
    except ValueError:
        raise OptionError(f"option '{name}' must be an ISO-8601 time such as "
                          f"2026-11-22T03:00:00Z, got {raw!r}") from None


@dataclass(frozen=True)
class ReadOptions:
    """``spark.read.format("osqueue")``: reads storage directly, no broker needed."""

    store: str
    queue: str
    table: str = "queue"  # or "archive"
    since_ms: int | None = None
    until_ms: int | None = None
    objects_per_partition: int = 8
    payload_schema: str | None = None
    filter_pushdown: bool = False
    #: ``missingQueue``: a queue with no object fails the read ("error"), or
    #: reads as no rows ("empty").
    missing_queue: str = "error"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        table = (_get(options, "table") or "queue").lower()
        if table not in ("queue", "archive"):
            raise OptionError(f"option 'table' must be 'queue' or 'archive', got {table!r}")
        out = cls(
            store=_req(options, "store", "s3://bucket/prefix"),
            queue=paths.check_queue_name(_req(options, "queue", "jobs")),
            table=table,
            since_ms=_time(options, "since"),
            until_ms=_time(options, "until"),
            objects_per_partition=_int(options, "objectsPerPartition", 8, 1,
                                       MAX_OBJECTS_PER_PARTITION),
            payload_schema=_get(options, "payloadSchema"),
            filter_pushdown=_bool(options, "filterPushdown", False),
            missing_queue=_choice(options, "missingQueue", ("error", "empty")),
        )
        if out.since_ms is not None and out.until_ms is not None and out.since_ms > out.until_ms:
            raise OptionError("option 'since' is after option 'until'")
        return out


@dataclass(frozen=True)
class BrokerOptions:
    """Where the broker is, for writes, streams and workers; for writes,
    ``group_column`` (``groupColumn``): the string column whose value is each
    row's group (null: none), which stays in the payload too."""

    broker: str
    queue: str
    token: str | None = field(default=None, repr=False)
    store: str | None = None
    batch_size: int = DEFAULT_WRITE_BATCH_ROWS
    timeout_s: float = 60.0
    group_column: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> BrokerOptions:
        broker = _req(options, "broker", "http://127.0.0.1:8765")
        if not broker.startswith(("http://", "https://")):
            raise OptionError(f"option 'broker' must be an http(s) URL, got {broker!r}")
        return cls(
            broker=broker,
            queue=paths.check_queue_name(_req(options, "queue", "jobs")),
            token=_get(options, "token"),
            store=_get(options, "store"),
            batch_size=_int(options, "batchSize", DEFAULT_WRITE_BATCH_ROWS, 1,
                            MAX_WRITE_BATCH_ROWS),
            timeout_s=_float(options, "timeoutS", 60.0, 1.0, MAX_TIMEOUT_S),
            group_column=(_get(options, "groupColumn") or "").strip() or None,
        )

    def check_schema(self, schema: Any) -> None:
        """Refuse, before anything is written, a ``groupColumn`` that is not a
        string column of ``schema`` (the written DataFrame's)."""
        name = self.group_column
        if name is None:
            return
        kinds = {f.name: f.dataType.simpleString() for f in schema.fields}
        if name not in kinds:
            raise OptionError(f"option 'groupColumn' names {name!r}, which is not a column of "
                              f"the DataFrame written (its columns: "
                              f"{', '.join(list(kinds)[:20])})")
        if kinds[name] != "string":
            raise OptionError(f"groupColumn {name!r} is {kinds[name]}; cast it to string")

    def client(self) -> QueueClient:
        return QueueClient(self.broker, self.queue, token=self.token, store=self.store,
                           timeout_s=self.timeout_s)


@dataclass(frozen=True)
class StreamReadOptions:
    """``spark.readStream.format("osqueue")``: a consumer.

    ``maxJobsPerTrigger`` bounds a micro-batch (PySpark 4.2+ also gets it as the
    source's default ``ReadMaxRows``); ``leaseS`` (seconds) is the lease each
    claim takes and each heartbeat renews; ``rowsPerPartition`` splits a batch
    into Spark partitions (tasks) of at most that many jobs; ``waitForQueue``
    (default false: a queue that does not exist fails the query) lets a
    stream start before its queue's first push, reading it as empty until then.
    """

    target: BrokerOptions
    max_jobs_per_trigger: int = 1000
    lease_s: float = 120.0
    worker: str = "spark-stream"
    rows_per_partition: int = 500
    wait_for_queue: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamReadOptions:
        worker = _get(options, "worker") or "spark-stream"
        if len(worker) > MAX_WORKER_CHARS:
            raise OptionError(f"option 'worker' must be at most {MAX_WORKER_CHARS} characters, "
                              f"got {len(worker)}")
        return cls(
            target=BrokerOptions.parse(options),
            max_jobs_per_trigger=_int(options, "maxJobsPerTrigger", 1000, 1, MAX_CLAIM_JOBS),
            lease_s=_float(options, "leaseS", 120.0, 1.0, MAX_LEASE_S),
            worker=worker,
            rows_per_partition=_int(options, "rowsPerPartition", 500, 1, MAX_CLAIM_JOBS),
            wait_for_queue=_bool(options, "waitForQueue", False),
        )


@dataclass(frozen=True)
class StreamWriteOptions:
    """``writeStream.format("osqueue")``: exactly once per (run of the query, batch id).

    ``stream_id`` (option ``streamId``, else ``checkpointLocation``) names the
    stream's staging area; ``checkpoint`` (option ``checkpointLocation``) is
    where the query id may be read from when Spark does not hand it to tasks
    (see :class:`osqueue_spark.datasource.stream_writer.QueueStreamWriter`).
    """

    target: BrokerOptions
    stream_id: str
    checkpoint: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamWriteOptions:
        checkpoint = _get(options, "checkpointLocation")
        stream_id = _get(options, "streamId") or checkpoint
        if not stream_id:
            raise OptionError(
                "streaming writes need a stable identity across restarts: set "
                ".option(\"checkpointLocation\", ...) or .option(\"streamId\", \"my-stream\")")
        return cls(target=BrokerOptions.parse(options), stream_id=stream_id,
                   checkpoint=checkpoint or None)
