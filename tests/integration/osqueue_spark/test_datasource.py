"""``format("osqueue")`` without a SparkSession: which reader or writer the options
choose, the schemas, and that every part Spark ships to executors pickles."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from broker.errors import InvalidRequest, UnknownQueue
from osqueue_spark.datasource import source as source_module
from osqueue_spark.datasource.options import OptionError
from osqueue_spark.datasource.reader import column_names
from osqueue_spark.datasource.source import (
    ARCHIVE_SCHEMA,
    QUEUE_SCHEMA,
    STREAM_SCHEMA,
    ArchiveReader,
    OsqueueDataSource,
    QueueReader,
    QueueStreamReader,
    QueueStreamWriter,
    QueueWriter,
)

BROKER = {"broker": "http://127.0.0.1:1", "queue": "jobs", "token": "s3cret"}


def source(**options: str) -> OsqueueDataSource:
    return OsqueueDataSource(options)


def schema(ddl: str) -> StructType:
    """The schema's column names (readers count and name columns; types do not matter
    here, and parsing DDL would need a SparkSession)."""
    return StructType([StructField(name, StringType()) for name in column_names(ddl)])


def roundtrip(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value))


def test_the_source_is_named_osqueue_and_registers_itself() -> None:
    registered: list[type] = []

    class Session:
        class dataSource:  # as SparkSession names it
            register = staticmethod(registered.append)

    source_module.register(Session())
    assert registered == [OsqueueDataSource] and OsqueueDataSource.name() == "osqueue"


def test_schemas_follow_the_options() -> None:
    assert source(store="file:///s", queue="q").schema() == QUEUE_SCHEMA
    assert source(store="file:///s", queue="q", table="ARCHIVE").schema() == ARCHIVE_SCHEMA
    assert source(store="file:///s", queue="q", payloadSchema="doc long").schema() == (
        QUEUE_SCHEMA + ", doc long")
    assert source(**BROKER).schema() == STREAM_SCHEMA
    for table, extra, named in (("queue", "n long, Errors string", "'Errors'"),
                                ("archive", "`result` string, `group` string",
                                 "'result', 'group'")):
        with pytest.raises(OptionError, match=f"option 'payloadSchema' names {named}, a "
                           f"column the {table} table has already"):
            source(store="file:///s", queue="q", table=table, payloadSchema=extra).schema()


def test_the_queue_columns_keep_their_positions_and_errors_comes_last() -> None:
    """Columns are only ever added last (a read by position keeps working); the
    commas inside ``errors``' type separate no columns, so a ``payloadSchema``
    column is named as such."""
    assert column_names(QUEUE_SCHEMA) == [
        "id", "seq", "status", "priority", "payload", "attempts", "max_attempts",
        "created_at", "run_at", "worker", "lease_expires_at", "last_error",
        "cancel_requested_at", "group", "errors"]
    assert column_names("a decimal(10, 2), b map<string,array<struct<x:int,y:int>>>, c int") \
        == ["a", "b", "c"]
    assert column_names("`x, y` int, `a``b` string COMMENT 'p, q', d:long,") == [
        "x, y", "a`b", "d"]
    reader = source(store="file:///s", queue="q").reader(schema(QUEUE_SCHEMA + ", doc long"))
    assert isinstance(reader, QueueReader) and reader.extra == ["doc"]


def test_readers_are_chosen_by_table_and_pushdown(tmp_path: Path) -> None:
    store = f"file://{tmp_path}"
    queue = source(store=store, queue="q").reader(schema(QUEUE_SCHEMA + ", doc long"))
    assert type(queue) is QueueReader and queue.extra == ["doc"]
    plain = source(store=store, queue="q", table="archive").reader(schema(ARCHIVE_SCHEMA))
    assert type(plain) is ArchiveReader and plain.extra == []
    pushed = source(store=store, queue="q", table="archive",
                    filterPushdown="true").reader(schema(ARCHIVE_SCHEMA))
    assert type(pushed) is ArchiveReader  # (pushed filters prune nothing: see the reader)
    for reader in (queue, plain, pushed):
        assert type(roundtrip(reader)) is type(reader)
    with pytest.raises(UnknownQueue, match="queue 'q' does not exist in file://"):
        queue.partitions()  # no queue object yet: a typo is said, not read as empty
    empty = source(store=store, queue="q", missingQueue="empty").reader(schema(QUEUE_SCHEMA))
    assert empty.partitions() == []  # asked for: nothing planned,
    assert list(empty.read(None)) == []  # and Spark's one empty partition gives no rows


def test_writers_pickle_without_their_connections() -> None:
    writer = source(**BROKER).writer(schema("payload string"), overwrite=False)
    assert type(writer) is QueueWriter and writer.prefix.startswith("w-")
    assert roundtrip(writer).prefix == writer.prefix
    with pytest.raises(InvalidRequest, match="only appends"):
        source(**BROKER).writer(schema("payload string"), overwrite=True)
    stream = source(**BROKER, streamId="s1").streamWriter(schema("payload string"), False)
    assert type(stream) is QueueStreamWriter and roundtrip(stream).prefix == stream.prefix
    with pytest.raises(OptionError, match="checkpointLocation"):
        source(**BROKER).streamWriter(schema("payload string"), False)


def test_the_stream_reader_ships_only_its_options() -> None:
    reader = source(**BROKER, maxJobsPerTrigger="5").streamReader(schema(STREAM_SCHEMA))
    assert type(reader) is QueueStreamReader and reader.opts.max_jobs_per_trigger == 5
    copy = roundtrip(reader)
    assert copy.opts == reader.opts and copy._client is None and copy._batches == {}
    assert b"s3cret" not in repr(reader.opts).encode()


def test_bad_options_are_refused_when_the_source_is_asked() -> None:
    with pytest.raises(OptionError, match="option 'queue' is required"):
        source(store="file:///s").reader(schema(QUEUE_SCHEMA))
    with pytest.raises(OptionError, match="option 'broker' is required"):
        source(queue="q").writer(schema("payload string"), overwrite=False)


def test_errors_leave_the_source_with_their_code_as_a_note() -> None:
    """Spark's Python worker formats a data source's exception into text (see
    ``osqueue_spark.datasource.errors``): the code must be in that text, once, and the
    message, type and pickling unchanged."""
    import traceback

    from broker.errors import StorageUnavailable
    from osqueue_spark.datasource.errors import with_code

    with pytest.raises(OptionError) as caught:
        source(store="file:///s").reader(schema(QUEUE_SCHEMA))
    err = caught.value
    assert err.__notes__ == ["osqueue error code: bad_option"]
    text = "".join(traceback.TracebackException.from_exception(err, compact=True).format())
    assert text.rstrip().endswith("OptionError: option 'queue' is required, e.g. "
                                  ".option(\"queue\", \"jobs\")\nosqueue error code: bad_option")
    assert str(roundtrip(err)) == str(err) and type(roundtrip(err)) is OptionError

    class Reader:
        @with_code
        def rows(self, fail_after: int) -> Any:  # as read(): a generator Spark iterates
            yield from range(fail_after)
            raise StorageUnavailable("store down")

        @with_code
        def other(self) -> None:
            raise ValueError("not ours")

    rows = Reader().rows(2)
    assert [next(rows), next(rows)] == [0, 1]
    with pytest.raises(StorageUnavailable) as down:
        next(rows)
    assert down.value.__notes__ == ["osqueue error code: storage_unavailable"]
    with pytest.raises(ValueError) as other:
        Reader().other()
    assert not hasattr(other.value, "__notes__")

    def fails() -> None:
        raise OptionError("x")

    with pytest.raises(OptionError) as twice:  # a note once, however many layers it crosses
        with_code(with_code(fails))()
    assert twice.value.__notes__ == ["osqueue error code: bad_option"]


def test_the_queue_reader_reads_v3_and_v4_objects(tmp_path: Path) -> None:
    """Without a SparkSession: the queue table's rows of a version-3 object (the
    golden fixture) and of the same queue written as version 4, one partition
    (the head's) each. (Objects with segments:
    tests/integration/osqueue_spark/test_queue_read.py.)"""
    from broker import paths
    from broker.model.format import codec
    from broker.model.format.decode import decode_state
    from broker.storage import store_from_url

    fixtures = Path(__file__).resolve().parents[2] / "fixtures"
    store = store_from_url(f"file://{tmp_path}")
    reader = source(store=f"file://{tmp_path}", queue="q").reader(schema(QUEUE_SCHEMA))

    def rows() -> list[Any]:
        parts = roundtrip(reader).partitions()
        assert len(parts) == 1
        return [row for part in parts for row in roundtrip(reader).read(roundtrip(part))]

    v3 = (fixtures / "golden_v3_queue.json").read_bytes()
    etag = store.create_if_absent(paths.state_key("q"), v3)
    v3_rows = rows()
    assert [row[0] for row in v3_rows] == [job["id"] for job in orjson.loads(v3)["jobs"]]
    store.write_if_match(paths.state_key("q"), codec.encode(decode_state(v3)), etag)
    assert rows() == v3_rows


def test_the_readers_show_cancelled_jobs(tmp_path: Path) -> None:
    """Without a SparkSession: the queue table shows a marked claimed job's
    ``cancel_requested_at`` and a cancelled job's status; the archive table a
    cancelled job with ``cancelled_at`` (its ``completed_at`` null), kept by a
    status filter of ``cancelled`` and pruned by ``since``/``until`` on when it
    ended."""
    from datetime import UTC, datetime

    from broker.storage import FileStore
    from osqueue_spark import QueueClient, start_broker
    from tests.support.broker_process import eventually
    from tests.support.inprocess import stored

    store = f"file://{tmp_path}"
    with start_broker(store) as broker:
        client = QueueClient(broker.url, "q")
        a, b, c = client.push_many(["a", "b", "c"])
        [held] = client.claim("w", 1)
        client.cancel([a, b])
        reader = source(store=store, queue="q").reader(schema(QUEUE_SCHEMA))
        columns = column_names(QUEUE_SCHEMA)
        rows = {row[0]: dict(zip(columns, row, strict=True))
                for part in reader.partitions() for row in reader.read(part)}
        assert rows[a]["status"] == "claimed"
        assert isinstance(rows[a]["cancel_requested_at"], datetime)
        assert rows[c]["status"] == "pending" and rows[c]["cancel_requested_at"] is None
        assert rows[c]["group"] is None and rows[c]["errors"] == []
        assert b not in rows or rows[b]["status"] == "cancelled"  # (until its archive lands)
        client.heartbeat([held.token])  # answered cancelled: the job ends
        client.complete(client.claim("w", 1)[0].token, "done")
        eventually(lambda: len(stored(FileStore(tmp_path)).jobs) == 0, 30, "the archive")

    def archive_rows(**options: str) -> dict[str, tuple[object, ...]]:
        reader = source(store=store, queue="q", table="archive", **options).reader(
            schema(ARCHIVE_SCHEMA))
        return {row[0]: row for part in reader.partitions() for row in reader.read(part)}

    rows = archive_rows()
    names = column_names(ARCHIVE_SCHEMA)
    cancelled = dict(zip(names, rows[a], strict=True))
    assert cancelled["status"] == "cancelled" and cancelled["completed_at"] is None
    assert cancelled["cancelled_at"].tzinfo is UTC and cancelled["worker"] == "w"
    assert cancelled["result"] is None and cancelled["payload"] == '"a"'
    assert dict(zip(names, rows[b], strict=True))["worker"] is None
    done = dict(zip(names, rows[c], strict=True))
    assert done["status"] == "completed" and done["cancelled_at"] is None
    assert done["completed_at"] is not None
    assert set(archive_rows(since="2000-01-01T00:00:00Z")) == {a, b, c}
    assert archive_rows(until="2000-01-01T00:00:00Z") == {}
