"""``QueueClient.push_many(jobs, request_key=...)``: a push whose outcome is unknown
(its reply lost, the client's retries used up) raises with the key it was sent
under, and a repeat with that key, from this client or another, answers the
first push's ids and creates nothing: keyless jobs are in the queue once.

The fault is a dropped reply: the fault proxy (tests/support/faultproxy) between
the client and a real broker process forwards the push, lets it land, and closes
the connection unanswered; for a later batch of a push, a transport that does
the same. Every test reads the store itself afterwards.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.errors import (
    BrokerUnavailable,
    BrokerUnreachable,
    InvalidRequest,
    NotTheBroker,
    OutcomeUnknown,
    StorageUnavailable,
)
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import QueueClient
from osqueue_spark.calls import MAX_PUSH_KEY_CHARS
from tests.support.broker_process import BrokerProcess
from tests.support.faultproxy import FaultConfig, FaultProxy
from tests.support.transports import DropReplyOf

JOBS = [{"n": n} for n in range(5)]


@pytest.fixture()
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture()
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(f"file://{store_dir}") as proc:
        yield proc


@pytest.fixture()
def proxy(broker: BrokerProcess) -> Iterator[FaultProxy]:
    """The fault proxy in front of the broker; POST answers may be dropped."""
    config = FaultConfig(rate=0.0, drop_methods=("POST",))
    with FaultProxy(broker.url, seed=3, config=config) as p:
        yield p


def _payloads(store_dir: Path, queue: str = "q") -> list[Any]:
    """Every job's payload in the queue object, in enqueue order."""
    state = decode_state(FileStore(store_dir).read(paths.state_key(queue)).data)
    return [orjson.loads(j.payload) for j in sorted(state.jobs.values(), key=lambda j: j.seq)]


def _ids(store_dir: Path, queue: str = "q") -> list[str]:
    state = decode_state(FileStore(store_dir).read(paths.state_key(queue)).data)
    return [j.id for j in sorted(state.jobs.values(), key=lambda j: j.seq)]


def test_a_push_whose_reply_was_dropped_is_repeated_with_its_key(
        proxy: FaultProxy, broker: BrokerProcess, store_dir: Path) -> None:
    proxy.storm(("drop",), count=1, methods=("POST",))  # the first push's reply
    client = QueueClient(proxy.url, "q", retry_s=0)  # no retries of its own: it raises
    with pytest.raises(BrokerUnavailable, match="failed after sending") as info:
        client.push_many(JOBS)
    assert proxy.stats()["faults"]["drop_landed"] == 1  # it landed; its answer was lost
    key = info.value.request_key
    assert key is not None and key.startswith("r-")
    assert f"request_key={key!r}" in info.value.message
    assert info.value.details["request_key"] == key
    assert _payloads(store_dir) == JOBS
    landed = _ids(store_dir)

    # the client goes on (its next calls' floors must not give the key up) ...
    assert client.push_many([{"n": 99}])
    # ... and repeats the push with the key: the first push's ids, nothing created
    assert client.push_many(JOBS, request_key=key) == landed
    # so may another client, in another process (here: another client object)
    with QueueClient(broker.url, "q") as other:
        assert other.push_many(JOBS, request_key=key) == landed
    assert _payloads(store_dir) == [*JOBS, {"n": 99}]
    client.close()


def test_a_push_of_several_batches_is_repeated_with_its_key(
        broker: BrokerProcess, store_dir: Path) -> None:
    jobs = [{"n": n} for n in range(7)]
    client = QueueClient(broker.url, "q", retry_s=0, transport=DropReplyOf(2))
    with pytest.raises(BrokerUnavailable) as info:
        client.push_many(jobs, batch_size=3, request_key="order-batch-17")
    assert info.value.request_key == "order-batch-17"
    assert _payloads(store_dir) == jobs[:6]  # batches 0 and 1 landed, 2 was not sent
    ids = client.push_many(jobs, batch_size=3, request_key="order-batch-17")
    assert _ids(store_dir) == ids and _payloads(store_dir) == jobs
    client.close()


def test_without_a_key_a_repeated_push_makes_copies(
        proxy: FaultProxy, store_dir: Path) -> None:
    """The control: repeating the same failed push without its key pushes every
    keyless job again (at least once, as documented)."""
    proxy.storm(("drop",), count=1, methods=("POST",))
    client = QueueClient(proxy.url, "q", retry_s=0)
    with pytest.raises(BrokerUnavailable):
        client.push_many(JOBS)
    client.push_many(JOBS)
    assert _payloads(store_dir) == [*JOBS, *JOBS]
    client.close()


def test_a_refused_push_carries_no_request_key(
        broker: BrokerProcess, store_dir: Path) -> None:
    """A refusal is an answer: no key to repeat the push with."""
    client = QueueClient(broker.url, "q", retry_s=0)
    with pytest.raises(InvalidRequest) as info:
        client.push_many([{"n": 1}, {"payload": 1, "max_attempts": 0}])
    assert info.value.request_key is None
    client.close()


@pytest.mark.parametrize("key", ["", " spaced", "é", "x" * (MAX_PUSH_KEY_CHARS + 1), 17])
def test_a_bad_request_key_is_refused_before_anything_is_sent(
        broker: BrokerProcess, store_dir: Path, key: Any) -> None:
    client = QueueClient(broker.url, "q")
    with pytest.raises(InvalidRequest, match="request_key must be"):
        client.push_many(JOBS, request_key=key)
    assert not store_dir.exists() or not FileStore(store_dir).list("q/")
    client.close()


@pytest.mark.parametrize("cls", [BrokerUnavailable, BrokerUnreachable, OutcomeUnknown,
                                 StorageUnavailable, NotTheBroker])
def test_the_request_key_survives_pickling(cls: type[BrokerUnavailable]) -> None:
    err = cls("lost", request_key="r-0123456789ab-4")
    back = pickle.loads(pickle.dumps(err))  # Spark moves errors between processes
    assert type(back) is cls and back.request_key == "r-0123456789ab-4"
    assert back.message == "lost" and cls("lost").request_key is None
