"""A broker's start-up (``Broker.start``) through injected storage faults, in this
process: each step (the self-test, listing the store, loading each queue object,
taking the queues over) rides out transient errors, logging each retry, for
``startup_timeout_s``; then it raises the last error. Permanent errors raise at
once. Every test checks the store itself afterwards.

The backoff waits and the deadlines they count against run on an injected
:class:`~tests.support.pause.SkippedPause` (the broker's ``pause``): the same
schedule and time limits, in no wall time; the tests read the waits it skipped.

The same through real processes, an S3 API and a fault proxy:
``tests/integration/broker/test_startup_process.py``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.errors import (
    CorruptState,
    OsqueueError,
    StorageRefused,
    StorageUnavailable,
    UnsafeStore,
)
from broker.model.format.decode import decode_state
from broker.model.ops import NewJob
from broker.service.broker import Broker
from broker.service.config import BrokerConfig
from broker.storage import Data, FileStore, ObjectStore, as_bytes
from tests.support.faults import LOST_REPLY, NOT_LANDED, REFUSED, FaultyStore
from tests.support.inprocess import run, started
from tests.support.pause import SkippedPause

QUEUES = ("a", "b", "c")
JOBS = 5  # a queue, one of "a"'s claimed


def _fill(store: ObjectStore) -> None:
    """Queues a, b, c of JOBS jobs each (one of a's claimed), left by a broker
    that stopped cleanly: no live owner, so the next broker takes them all."""

    async def go() -> None:
        old = await started(store, "http://old")
        for name in QUEUES:
            await old.push(name, [NewJob(orjson.dumps({"q": name, "n": n})) for n in range(JOBS)])
        assert len(await old.claim("a", "w1", lease_s=600)) == 1
        await old.stop()

    run(go())


def _snapshot(store: ObjectStore) -> dict[str, bytes]:
    return {key: store.get(key) for key in store.list("")}


def _broker(store: ObjectStore, pause: SkippedPause | None = None, fault_retry_s: float = 2.0,
            **config: object) -> Broker:
    """A broker waiting its start-up's and loops' backoff on ``pause`` (a
    fresh :class:`SkippedPause` if None: the waits are skipped, counted as elapsed)."""
    config.setdefault("startup_timeout_s", 30.0)
    return Broker(store, BrokerConfig(url="http://new", **config),  # type: ignore[arg-type]
                  pause=pause or SkippedPause(), fault_retry_s=fault_retry_s)


def _start_and_stop(broker: Broker) -> None:
    async def go() -> None:
        await broker.start()
        try:
            assert sorted(n for n in QUEUES if broker.served(n)) == list(QUEUES)
            assert (await broker.stats("b"))["counts"]["pending"] == JOBS
        finally:
            await broker.stop(5)

    run(go())


def _start_fails(broker: Broker) -> OsqueueError:
    async def go() -> OsqueueError:
        try:
            await broker.start()
        except OsqueueError as exc:
            await broker.stop(1)
            return exc
        await broker.stop(1)
        raise AssertionError("start-up did not fail")

    return run(go())


def _check_store(store: ObjectStore) -> None:
    """After the broker's clean stop: every queue object decodes, names no owner
    (the stop cleared the record), and holds its jobs once each; no self-test
    probe is left."""
    for name in QUEUES:
        state = decode_state(store.read(paths.state_key(name)).data)
        assert state.broker is None  # the clean stop cleared it
        payloads = sorted(orjson.loads(j.payload)["n"] for j in state.jobs.values())
        assert payloads == list(range(JOBS)), name
    assert not store.list("_osqueue/")  # no self-test probe left behind


def _retries(caplog: pytest.LogCaptureFixture, what: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "osqueue.broker" and r.getMessage().startswith(f"start-up: {what}")]


@pytest.fixture()
def inner(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / "store")
    _fill(store)
    return store


# -- transient errors: ridden out, each retry logged --------------------------------


def test_start_rides_out_a_self_test_that_keeps_failing(
        inner: FileStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "osqueue")
    store = FaultyStore(inner)
    # Each self-test tries its first probe 3 times: 8 failures fail two whole
    # self-tests and two tries of the third, which then passes.
    store.inject("create_if_absent", NOT_LANDED, key_contains="_osqueue/selftest/", times=8)
    broker = _broker(store, self_test=True)
    _start_and_stop(broker)
    assert len(_retries(caplog, "the store's self-test failed")) == 2
    assert "injected" in _retries(caplog, "the store's self-test failed")[0]
    _check_store(inner)


def test_start_rides_out_a_store_that_cannot_be_listed_for_a_while(
        inner: FileStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "osqueue")
    store = FaultyStore(inner)
    store.inject("list", NOT_LANDED, times=4)
    pause = SkippedPause()
    broker = _broker(store, pause)
    _start_and_stop(broker)
    retries = _retries(caplog, "loading the queue objects failed")
    assert len(retries) == 4
    assert [m.split("; attempt ")[1].split(" ")[0] for m in retries] == ["2", "3", "4", "5"]
    # start-up's backoff: 0.25 s doubling, each jittered to [0.5, 1.5) times it
    assert len(pause.slept) == 4
    for delay, nominal in zip(pause.slept, [0.25, 0.5, 1.0, 2.0], strict=True):
        assert 0.5 * nominal <= delay < 1.5 * nominal, pause.slept
    _check_store(inner)


def test_start_rides_out_reads_of_one_queue_object(
        inner: FileStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "osqueue")
    store = FaultyStore(inner)
    store.inject("read", NOT_LANDED, key_contains="b/queue.json", times=5)
    pause = SkippedPause()
    broker = _broker(store, pause, commit_timeout_s=0.3)
    _start_and_stop(broker)
    rereads = [r.getMessage() for r in caplog.records if "re-read of b/queue.json" in
               r.getMessage()]
    assert len(rereads) == 5  # each retry of the read logged
    # the read's backoff (50 ms doubling, jittered) went past a batch's time on
    # failing storage (commit_timeout_s), within start-up's
    assert len(pause.slept) == 5 and sum(pause.slept) > 0.3, pause.slept
    _check_store(inner)


def test_start_rides_out_takeover_writes_that_fail_or_lose_their_reply(
        inner: FileStore) -> None:
    store = FaultyStore(inner)
    store.inject("write_if_match", NOT_LANDED, key_contains="a/queue.json", times=3)
    store.inject("write_if_match", LOST_REPLY, key_contains="b/queue.json")
    broker = _broker(store)

    async def go() -> None:
        await broker.start()
        try:
            for name in QUEUES:  # each takeover landed once, naming this broker
                state = decode_state(inner.read(paths.state_key(name)).data)
                assert state.broker is not None and state.broker.id == broker.id, name
            held = [j for j in decode_state(inner.read(paths.state_key("a")).data).jobs.values()
                    if j.lease is not None]
            assert len(held) == 1 and held[0].lease.worker == "w1"  # re-leased, kept
        finally:
            await broker.stop(5)

    run(go())
    assert ("write_if_match", LOST_REPLY, "b/queue.json") in store.injected
    _check_store(inner)


def test_a_takeover_failing_past_the_commit_timeout_does_not_fail_start_up(
        inner: FileStore) -> None:
    """Its queue is served (its loop faulted) and its loop writes the takeover by
    itself once storage answers again: no client call needed."""
    store = FaultyStore(inner)
    store.inject("write_if_match", NOT_LANDED, key_contains="c/queue.json", times=None)
    # (its loop re-reads a faulted object every fault_retry_s: 2 s, 0.05 s here)
    broker = _broker(store, commit_timeout_s=0.3, fault_retry_s=0.05)

    async def go() -> None:
        await broker.start()
        try:
            c = broker.served("c")
            assert c is not None and c.loop.fault is not None
            assert decode_state(inner.read(paths.state_key("c")).data).broker is None
            store.heal()
            for _ in range(200):  # the loop re-reads a faulted object every 0.05 s
                state = decode_state(inner.read(paths.state_key("c")).data)
                if state.broker is not None:
                    break
                await asyncio.sleep(0.05)
            assert state.broker is not None and state.broker.id == broker.id
        finally:
            await broker.stop(5)

    run(go())
    _check_store(inner)


# -- the start-up time is a bound -----------------------------------------------------


def test_a_store_failing_longer_than_the_start_up_time_fails_with_the_last_error(
        inner: FileStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "osqueue")
    before = _snapshot(inner)
    store = FaultyStore(inner)
    store.inject("list", NOT_LANDED, times=None)
    error = _start_fails(_broker(store, startup_timeout_s=1.0))
    assert isinstance(error, StorageUnavailable) and error.retryable
    assert error.message.startswith("loading the queue objects kept failing for 1 s (")
    assert error.message.endswith("the start-up time is 1 s): injected: list  timed out "
                                  "before it landed")
    assert _retries(caplog, "loading the queue objects failed")
    assert _snapshot(inner) == before  # nothing written


def test_a_start_up_that_gives_up_while_loading_writes_no_queue(
        inner: FileStore) -> None:
    """"a" and "c" load and could be taken over, but "b" cannot be read: the
    broker gives up before it writes anything, so no queue names a broker that
    never served."""
    before = _snapshot(inner)
    store = FaultyStore(inner)
    store.inject("read", NOT_LANDED, key_contains="b/queue.json", times=None)
    broker = _broker(store, startup_timeout_s=1.0)
    error = _start_fails(broker)
    assert isinstance(error, StorageUnavailable)
    assert "could not read b/queue.json" in error.message
    assert _snapshot(inner) == before
    assert not broker._queues  # the queues made for loading were forgotten


# -- errors that will not go away: at once ----------------------------------------------


@pytest.mark.parametrize(("method", "key"), [("create_if_absent", "_osqueue/selftest/"),
                                             ("list", ""), ("read", "b/queue.json")])
def test_a_refusal_fails_start_up_at_once(inner: FileStore, caplog: pytest.LogCaptureFixture,
                                          method: str, key: str) -> None:
    caplog.set_level(logging.WARNING, "osqueue")
    before = _snapshot(inner)
    store = FaultyStore(inner)
    store.inject(method, REFUSED, key_contains=key, times=None)
    error = _start_fails(_broker(store, self_test=True, startup_timeout_s=600))
    assert isinstance(error, StorageRefused) and "AccessDenied (403)" in error.message
    assert store.injected == [(method, REFUSED, store.injected[0][2])]  # tried once
    assert not _retries(caplog, "")
    assert _snapshot(inner) == before


def test_a_corrupt_queue_object_fails_start_up_at_once(inner: FileStore) -> None:
    etag = inner.read(paths.state_key("c")).etag
    inner.write_if_match(paths.state_key("c"), b'{"format": "osqueue", "version"', etag)
    before = _snapshot(inner)
    error = _start_fails(_broker(inner, startup_timeout_s=600))
    assert isinstance(error, CorruptState) and "c/queue.json" in error.message
    assert _snapshot(inner) == before


def test_a_store_that_fails_the_self_test_fails_start_up_at_once(inner: FileStore) -> None:
    class IgnoresConditions(FaultyStore):
        def write_if_match(self, key: str, data: Data, etag: str) -> str:
            return self.inner.put(key, as_bytes(data))

    store = IgnoresConditions(inner)
    error = _start_fails(_broker(store, self_test=True, startup_timeout_s=600))
    assert isinstance(error, UnsafeStore)


# -- the setting -------------------------------------------------------------------------


def test_the_start_up_time_comes_from_its_flag_or_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from broker.cli import main
    from broker.flags import BrokerFlags

    store = f"file://{tmp_path}"
    assert BrokerFlags.load({"store": store}).broker_config().startup_timeout_s == 60
    monkeypatch.setenv("OSQUEUE_STARTUP_TIMEOUT_S", "7.5")
    assert BrokerFlags.load({"store": store}).broker_config().startup_timeout_s == 7.5
    assert BrokerFlags.load({"store": store, "startup_timeout_s": "0"}
                               ).broker_config().startup_timeout_s == 0
    assert main(["--store", store, "--startup-timeout-s", "-1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "osqueue-broker: --startup-timeout-s (or OSQUEUE_STARTUP_TIMEOUT_S): Input should be "
        "greater than or equal to 0")
    assert not list(tmp_path.iterdir())  # nothing opened, nothing written
    with pytest.raises(ValueError, match=r"startup_timeout_s must be within \[0, 86400\]"):
        BrokerConfig(startup_timeout_s=float("nan"))
