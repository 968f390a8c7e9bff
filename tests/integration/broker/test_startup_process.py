"""``osqueue-broker`` starting through S3 trouble, as a real process on moto's S3
server behind the fault proxy (tests/support/faultproxy): a storm of 500 and 503
answers is ridden out (each retry logged on stderr) and the broker serves; a
storm longer than ``--startup-timeout-s`` ends it with the last error; a missing
bucket or denied access end it at once. Each test checks the bucket afterwards.

Brokers are waited on by their ready line or their exit, never by sleeping.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import orjson
import pytest

from broker import paths
from broker.model.format.decode import decode_state
from broker.model.ops import NewJob
from broker.storage import S3Store
from osqueue_spark.client import QueueClient
from tests.support.broker_process import BROKER_ID, BrokerProcess
from tests.support.faultproxy import FaultConfig, FaultProxy
from tests.support.inprocess import run, started
from tests.support.motoserver import MotoServer

QUEUES = ("a", "b")
JOBS = 4
#: The storm the acceptance names: every request answered 500 or 503 for 30 s.
STORM_S = 30.0


@pytest.fixture()
def proxy(moto_server: MotoServer) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server.endpoint, seed=33, config=FaultConfig(rate=0.0)) as p:
        yield p


def _store(endpoint: str, bucket: str) -> S3Store:
    return S3Store(bucket, "queues", endpoint_url=endpoint)


def _fill(store: S3Store) -> None:
    """Queues a and b, JOBS jobs each (one of a's claimed), left by a broker that
    stopped cleanly (its record cleared: the next broker takes both over)."""

    async def go() -> None:
        old = await started(store, "http://old")
        for name in QUEUES:
            await old.push(name, [NewJob(orjson.dumps({"n": n})) for n in range(JOBS)])
        assert len(await old.claim("a", "w1", lease_s=600)) == 1
        await old.stop()

    run(go())


def _snapshot(store: S3Store) -> dict[str, bytes]:
    return {key: store.get(key) for key in store.list("")}


def _log_lines(proc: BrokerProcess) -> list[dict[str, object]]:
    return [json.loads(line) for line in proc.lines if line.startswith("{")]


def _retries(proc: BrokerProcess) -> list[str]:
    return [str(e["msg"]) for e in _log_lines(proc) if str(e["msg"]).startswith("start-up: ")]


@pytest.mark.slow
def test_a_broker_started_in_a_30_s_storm_of_5xx_starts_and_serves(
        proxy: FaultProxy, moto_server: MotoServer, s3_bucket: str) -> None:
    direct = _store(moto_server.endpoint, s3_bucket)
    _fill(direct)
    proxy.storm(("error500", "error503"), seconds=STORM_S)
    url = f"s3://{s3_bucket}/queues?endpoint={proxy.url}"
    with BrokerProcess(url, "--startup-timeout-s", "120").start(timeout_s=180) as proc:
        assert proxy.stats()["storm"] is None  # it could not start before the storm ended
        faults = proxy.stats()["faults"]
        assert faults["error500"] > 0 and faults["error503"] > 0
        retries = _retries(proc)
        assert len(retries) >= 2, proc.output  # each retry is logged
        assert all(r.startswith("start-up: the store's self-test failed (S3 answered ")
                   for r in retries), retries
        assert any("InternalError (HTTP 500)" in r for r in retries) or any(
            "SlowDown (HTTP 503)" in r for r in retries)
        match = BROKER_ID.search(proc.output)
        assert match is not None
        broker_id = match.group(1)
        # it serves: the queues it took over, and a new one
        with QueueClient(proc.url, "b", retry_s=10) as client:
            pushed = client.push_many([{"n": JOBS}])
            claimed = client.claim("w2", max_jobs=JOBS + 1)
            assert len(claimed) == JOBS + 1
            assert client.with_queue("new").push({"n": 0})
        # the bucket: every queue object whole, one owner (this broker), each job once
        for name in (*QUEUES, "new"):
            state = decode_state(direct.read(paths.state_key(name)).data)
            assert state.broker is not None and state.broker.id == broker_id, name
        a = decode_state(direct.read(paths.state_key("a")).data)
        assert sorted(orjson.loads(j.payload)["n"] for j in a.jobs.values()) == list(range(JOBS))
        held = [j for j in a.jobs.values() if j.lease is not None]
        assert len(held) == 1 and held[0].lease.worker == "w1"  # re-leased by the takeover
        b = decode_state(direct.read(paths.state_key("b")).data)
        assert sorted(orjson.loads(j.payload)["n"] for j in b.jobs.values()) == \
            list(range(JOBS + 1))
        assert pushed[0] in {j.id for j in claimed}
        assert not direct.list("_osqueue/")  # no self-test probe left behind
    assert proc.proc is not None and proc.proc.returncode == 0


def test_a_storm_longer_than_the_start_up_time_ends_it_with_the_last_error(
        proxy: FaultProxy, moto_server: MotoServer, s3_bucket: str) -> None:
    direct = _store(moto_server.endpoint, s3_bucket)
    _fill(direct)
    before = _snapshot(direct)
    proxy.storm(("error500", "error503"), seconds=600)
    url = f"s3://{s3_bucket}/queues?endpoint={proxy.url}"
    proc = BrokerProcess(url, "--no-self-test", "--startup-timeout-s", "3")
    try:
        assert proc.start(expect_ready=False).wait(timeout_s=60) == 2
    finally:
        proc.stop()
        proxy.calm()
    last = proc.lines[-1]
    assert last.startswith(f"osqueue-broker: could not start on store s3://{s3_bucket}/queues: "
                           "loading the queue objects kept failing for "), proc.output
    assert "the start-up time is 3 s): S3 answered " in last
    assert last.rstrip().endswith("for '' [storage_unavailable]")
    assert "InternalError (HTTP 500)" in last or "SlowDown (HTTP 503)" in last
    assert _retries(proc), proc.output
    assert "ready on" not in proc.output
    assert _snapshot(direct) == before


def test_a_missing_bucket_ends_start_up_at_once(moto_server: MotoServer) -> None:
    missing = f"osq-missing-{uuid.uuid4().hex[:8]}"
    proc = BrokerProcess(f"s3://{missing}/queues?endpoint={moto_server.endpoint}",
                         "--startup-timeout-s", "600")
    try:
        # (a broker that retried would still be running when the wait ends)
        assert proc.start(expect_ready=False).wait(timeout_s=60) == 2
    finally:
        proc.stop()
    assert proc.lines[-1].rstrip() == (
        f"osqueue-broker: refusing to start on store s3://{missing}/queues: S3 bucket "
        f"s3://{missing} does not exist (NoSuchBucket (HTTP 404)) [storage_refused]")
    assert not _retries(proc)


def test_denied_access_ends_start_up_at_once(proxy: FaultProxy, moto_server: MotoServer,
                                             s3_bucket: str) -> None:
    direct = _store(moto_server.endpoint, s3_bucket)
    _fill(direct)
    before = _snapshot(direct)
    proxy.storm(("error403",), seconds=600)
    proc = BrokerProcess(f"s3://{s3_bucket}/queues?endpoint={proxy.url}",
                         "--startup-timeout-s", "600")
    try:
        assert proc.start(expect_ready=False).wait(timeout_s=60) == 2
    finally:
        proc.stop()
        proxy.calm()
    assert proc.lines[-1].startswith(f"osqueue-broker: refusing to start on store "
                                     f"s3://{s3_bucket}/queues: S3 denied access to ")
    assert proc.lines[-1].rstrip().endswith("[storage_refused]")
    assert not _retries(proc)
    assert _snapshot(direct) == before
