"""``start_broker()`` (a notebook's broker) starts through a storage blip as
``osqueue-broker`` does: an S3 store behind the fault proxy answering 500/503 to
everything for a while starts and serves; one that fails longer than
``startup_timeout_s`` raises the last error; a missing bucket raises at once."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from broker import paths
from broker.errors import StorageRefused, StorageUnavailable
from broker.model.format.decode import decode_state
from broker.storage import S3Store
from osqueue_spark import QueueClient, start_broker
from tests.support.faultproxy import FaultConfig, FaultProxy
from tests.support.motoserver import MotoServer


@pytest.fixture()
def proxy(moto_server: MotoServer) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server.endpoint, seed=7, config=FaultConfig(rate=0.0)) as p:
        yield p


def test_start_broker_rides_out_a_storm_and_serves(
        proxy: FaultProxy, moto_server: MotoServer, s3_bucket: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "osqueue")
    # (counted, not timed: start_broker's first call imports the server meanwhile; a
    # self-test in a storm spends 45 requests: 3 tries of a probe write and its
    # read-back, 5 requests each, then 3 of its clean-up)
    proxy.storm(("error500", "error503"), count=60)
    with start_broker(f"s3://{s3_bucket}/q?endpoint={proxy.url}",
                      startup_timeout_s=60) as broker:
        assert proxy.stats()["storm"] is None
        assert [r for r in caplog.records if r.getMessage().startswith(
            "start-up: the store's self-test failed (S3 answered ")]
        with QueueClient(broker.url, "jobs") as client:
            job = client.push({"n": 1})
        stored = S3Store(s3_bucket, "q", endpoint_url=moto_server.endpoint)
        state = decode_state(stored.read(paths.state_key("jobs")).data)
        assert [j.id for j in state.jobs.values()] == [job]
        assert state.broker is not None and state.broker.url == broker.url


def test_start_broker_raises_the_last_error_past_its_start_up_time(
        proxy: FaultProxy, moto_server: MotoServer, s3_bucket: str) -> None:
    proxy.storm(("error503",), seconds=600)
    try:
        with pytest.raises(StorageUnavailable) as info:
            start_broker(f"s3://{s3_bucket}/q?endpoint={proxy.url}", startup_timeout_s=1)
    finally:
        proxy.calm()
    assert info.value.message.startswith("the store's self-test kept failing for ")
    assert "the start-up time is 1 s): S3 answered SlowDown (HTTP 503)" in info.value.message
    assert not S3Store(s3_bucket, "q", endpoint_url=moto_server.endpoint).list("")


def test_start_broker_on_a_missing_bucket_raises_at_once(
        moto_server: MotoServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "osqueue")
    missing = f"osq-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(StorageRefused, match=f"S3 bucket s3://{missing} does not exist"):
        start_broker(f"s3://{missing}/q?endpoint={moto_server.endpoint}",
                     startup_timeout_s=600)
    assert not [r for r in caplog.records if r.getMessage().startswith("start-up:")]
