"""Data source options: each bad option gets a message that names it; good ones parse
once into frozen, picklable dataclasses that never show the token. No Spark."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime

import pytest

from broker.errors import InvalidRequest
from broker.limits import MAX_CLAIM_JOBS, MAX_LEASE_S, MAX_WORKER_CHARS
from osqueue_spark.datasource.options import (
    MAX_WRITE_BATCH_ROWS,
    BrokerOptions,
    OptionError,
    ReadOptions,
    StreamReadOptions,
    StreamWriteOptions,
)

READ = {"store": "file:///tmp/s", "queue": "jobs"}
BROKER = {"broker": "http://127.0.0.1:8765", "queue": "jobs"}


def epoch_ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


def test_read_options_parse_with_defaults_and_any_case() -> None:
    opts = ReadOptions.parse({"STORE": " file:///tmp/s ", "Queue": "jobs", "TABLE": "Archive",
                              "since": "2026-11-22", "until": "2026-11-22T03:00:00",
                              "filterpushdown": "yes", "objectsPerPartition": "3"})
    assert opts == ReadOptions(store="file:///tmp/s", queue="jobs", table="archive",
                               since_ms=epoch_ms(datetime(2026, 11, 22, tzinfo=UTC)),
                               until_ms=epoch_ms(datetime(2026, 11, 22, 3, tzinfo=UTC)),
                               objects_per_partition=3, filter_pushdown=True)
    assert ReadOptions.parse(READ) == ReadOptions(store="file:///tmp/s", queue="jobs")
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.queue = "other"  # type: ignore[misc]


@pytest.mark.parametrize(("options", "message"), [
    ({"queue": "jobs"}, "option 'store' is required, e.g."),
    ({"store": "  ", "queue": "jobs"}, "option 'store' is required"),
    ({"store": "file:///s"}, "option 'queue' is required"),
    ({**READ, "queue": "../etc"}, "queue name"),
    ({**READ, "table": "jobs"}, "option 'table' must be 'queue' or 'archive', got 'jobs'"),
    ({**READ, "since": "yesterday"}, "option 'since' must be an ISO-8601 time"),
    ({**READ, "until": "2026-13-01"}, "option 'until' must be an ISO-8601 time"),
    ({**READ, "since": "2026-11-23", "until": "2026-11-22"}, "'since' is after option 'until'"),
    ({**READ, "objectsPerPartition": "many"}, "'objectsPerPartition' must be an integer"),
    ({**READ, "objectsPerPartition": "0"}, "'objectsPerPartition' must be within [1, "),
    ({**READ, "filterPushdown": "maybe"}, "'filterPushdown' must be true or false, got 'maybe'"),
])
def test_bad_read_options_say_what_is_wrong(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        ReadOptions.parse(options)
    assert message in info.value.message


def test_broker_options_parse_and_hide_the_token() -> None:
    opts = BrokerOptions.parse({**BROKER, "token": "s3cret", "batchSize": "500",
                                "timeoutS": "2.5", "store": "file:///s"})
    assert (opts.batch_size, opts.timeout_s, opts.store) == (500, 2.5, "file:///s")
    assert "s3cret" not in repr(opts)
    copy = pickle.loads(pickle.dumps(opts))
    assert copy == opts and copy.token == "s3cret"
    client = opts.client()
    assert (client.url, client.queue, client.timeout_s) == (BROKER["broker"], "jobs", 2.5)
    assert "s3cret" not in repr(client)


@pytest.mark.parametrize(("options", "message"), [
    ({"queue": "jobs"}, "option 'broker' is required"),
    ({**BROKER, "broker": "127.0.0.1:8765"}, "option 'broker' must be an http(s) URL"),
    ({**BROKER, "batchSize": "1.5"}, "option 'batchSize' must be an integer, got '1.5'"),
    ({**BROKER, "batchSize": str(MAX_WRITE_BATCH_ROWS + 1)}, "'batchSize' must be within"),
    ({**BROKER, "timeoutS": "soon"}, "option 'timeoutS' must be a number, got 'soon'"),
    ({**BROKER, "timeoutS": "0.5"}, "option 'timeoutS' must be within [1.0, "),
])
def test_bad_broker_options_say_what_is_wrong(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as info:
        BrokerOptions.parse(options)
    assert message in info.value.message and info.value.code == "bad_option"


def test_stream_read_options_are_bounded_by_the_brokers_limits() -> None:
    opts = StreamReadOptions.parse({**BROKER, "maxJobsPerTrigger": str(MAX_CLAIM_JOBS),
                                    "leaseS": str(MAX_LEASE_S), "worker": "w1"})
    assert (opts.max_jobs_per_trigger, opts.lease_s, opts.worker) == (
        MAX_CLAIM_JOBS, MAX_LEASE_S, "w1")
    assert StreamReadOptions.parse(BROKER).worker == "spark-stream"
    for name, value in (("maxJobsPerTrigger", str(MAX_CLAIM_JOBS + 1)),
                        ("leaseS", str(MAX_LEASE_S + 1)), ("leaseS", "0.5"),
                        ("worker", "w" * (MAX_WORKER_CHARS + 1))):
        with pytest.raises(OptionError, match=f"option '{name}' must be"):
            StreamReadOptions.parse({**BROKER, name: value})


def test_stream_writes_need_a_stable_identity() -> None:
    with pytest.raises(OptionError, match="checkpointLocation"):
        StreamWriteOptions.parse(BROKER)
    by_checkpoint = StreamWriteOptions.parse({**BROKER, "checkpointLocation": "/tmp/ck"})
    assert (by_checkpoint.stream_id, by_checkpoint.checkpoint) == ("/tmp/ck", "/tmp/ck")
    named = StreamWriteOptions.parse({**BROKER, "streamId": "s1"})
    assert (named.stream_id, named.checkpoint, named.target.queue) == ("s1", None, "jobs")


def test_option_errors_pickle() -> None:
    """Spark carries an executor's error to the driver by pickle."""
    with pytest.raises(OptionError) as info:
        BrokerOptions.parse({})
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is OptionError and copy.message == info.value.message
