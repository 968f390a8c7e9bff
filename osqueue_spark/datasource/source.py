"""The ``osqueue`` Spark data source (PySpark Python Data Source API, Spark 4.x).

* ``spark.read.format("osqueue").option("store", URL).option("queue", Q).load()``:
  one row per job, read straight from storage (no broker), one consistent
  version of the queue: a partition for the queue object's jobs and one per
  segment of pending jobs (a deep queue's bulk). ``table=archive``
  reads completed jobs, one partition per ``objectsPerPartition`` archive
  objects, pruned by ``since``/``until``. Filters Spark pushes prune nothing
  (``filterPushdown=true`` is accepted and ignored; see
  :mod:`osqueue_spark.datasource.reader` for why).
  ``payloadSchema`` (DDL) adds the payload's fields as columns.
* ``df.write.format("osqueue").option("broker", URL).option("queue", Q)``:
  exactly once under task retries and speculation. Each task stages its jobs
  under its own write id; the driver's ``commit`` publishes the staged jobs
  of the successful attempts in one broker operation and drops the rest;
  ``abort`` drops everything; staged jobs of a writer that vanished expire.
* ``writeStream``: the same, each micro-batch published at most once per run
  of the query (see :class:`QueueStreamWriter` for how a run is recognised).
* ``readStream``: each micro-batch claims up to ``maxJobsPerTrigger`` jobs,
  a driver-side thread heartbeats them until Spark commits the batch, then
  they are completed. Jobs of a query that died come back when their leases
  expire. ``trigger(availableNow=True)`` drains what the queue holds at the
  start in bounded batches and stops (PySpark 4.2+; what 4.0 and 4.1 do is
  in :mod:`osqueue_spark.datasource.stream_reader`).

Everything here pickles: options are parsed once into frozen dataclasses and
connections are opened in ``read``/``write``/``commit``, never in ``__init__``.

Where each part lives: :mod:`osqueue_spark.datasource.reader` (batch reads),
:mod:`osqueue_spark.datasource.writer` (batch writes and staging),
:mod:`osqueue_spark.datasource.stream_writer`, :mod:`osqueue_spark.datasource.stream_reader`, and
:mod:`osqueue_spark.datasource.options` (parsing every option); this module picks one by
the options and registers the source.
"""

from __future__ import annotations

import functools
import logging
import uuid
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from broker.errors import InvalidRequest
from osqueue_spark.datasource.driver_errors import install as install_driver_errors
from osqueue_spark.datasource.errors import with_code
from osqueue_spark.datasource.options import (
    BrokerOptions,
    OptionError,
    ReadOptions,
    StreamReadOptions,
    StreamWriteOptions,
)
from osqueue_spark.datasource.python_exec import use_this_python
from osqueue_spark.datasource.reader import (
    ARCHIVE_SCHEMA,
    FILTER_PUSHDOWN_IGNORED,
    QUEUE_SCHEMA,
    ArchiveReader,
    QueueReader,
    column_names,
)
from osqueue_spark.datasource.stream_reader import STREAM_SCHEMA, QueueStreamReader
from osqueue_spark.datasource.stream_writer import QueueStreamWriter, checkpoint_query_id
from osqueue_spark.datasource.writer import QueueWriter, StagedMessage

__all__ = [
    "ARCHIVE_SCHEMA",
    "QUEUE_SCHEMA",
    "STREAM_SCHEMA",
    "ArchiveReader",
    "OsqueueDataSource",
    "QueueReader",
    "QueueStreamReader",
    "QueueStreamWriter",
    "QueueWriter",
    "StagedMessage",
    "checkpoint_query_id",
    "register",
]


class OsqueueDataSource(DataSource):
    """``format("osqueue")``."""

    @classmethod
    def name(cls) -> str:
        return "osqueue"

    @with_code
    def schema(self) -> str:
        table = (self.options.get("table") or "queue").lower()
        base = ARCHIVE_SCHEMA if table == "archive" else QUEUE_SCHEMA
        extra = self.options.get("payloadSchema")
        if self.options.get("broker"):  # writes ignore it; batch reads never take a broker
            return STREAM_SCHEMA
        if not extra:
            return base
        taken = {name.lower() for name in column_names(base)}  # (Spark's names: any case)
        clash = [name for name in column_names(extra) if name.lower() in taken]
        if clash:  # (two columns of one name: ambiguous to select, and Arrow fails the read)
            raise OptionError(
                f"option 'payloadSchema' names {', '.join(map(repr, clash))}, a column the "
                f"{table} table has already; read such a payload field from the payload "
                f"column instead, e.g. get_json_object(payload, '$.{clash[0]}')")
        return f"{base}, {extra}"

    @with_code
    def reader(self, schema: Any) -> DataSourceReader:
        opts = ReadOptions.parse(self.options)
        if opts.filter_pushdown:
            _say_pushdown_ignored()
        return (ArchiveReader if opts.table == "archive" else QueueReader)(opts, schema)

    @with_code
    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidRequest("osqueue only appends: use .mode(\"append\")")
        opts = BrokerOptions.parse(self.options)
        opts.check_schema(schema)
        return QueueWriter(opts, uuid.uuid4().hex)

    @with_code
    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        opts = StreamWriteOptions.parse(self.options)
        opts.target.check_schema(schema)
        return QueueStreamWriter(opts)

    @with_code
    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return QueueStreamReader(StreamReadOptions.parse(self.options))


log = logging.getLogger("osqueue.spark")


@functools.cache
def _say_pushdown_ignored() -> None:
    log.warning(FILTER_PUSHDOWN_IGNORED)  # once per process


def register(spark: Any) -> None:
    """Register the ``osqueue`` data source with a SparkSession: a classic one or a
    Spark Connect client (``pyspark.sql.connect.session.SparkSession``), whose
    server then runs the source in its Python workers.

    Before that, on a local classic session whose workers' Python nobody chose,
    point them at this interpreter (:mod:`.python_exec`: else a script run with
    a venv's Python, the venv not activated, fails in every task); and make
    osqueue errors raised inside Spark reach this process as themselves
    (:mod:`.driver_errors`).
    """
    use_this_python(spark)
    install_driver_errors(spark)
    spark.dataSource.register(OsqueueDataSource)
