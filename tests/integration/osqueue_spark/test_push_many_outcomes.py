"""What ``QueueClient.push_many`` tells its caller when a push of several batches
ends part way, and what a repeat with its request key may do.

* A batch refused after earlier batches landed (the queue full, a bad job): the
  earlier batches are in the queue, the refused one and those after it are not.
  The error says so (``details['pushed']``, ``details['ids']``), so the caller
  pushes the rest, not the whole list again (which would copy every keyless job
  that landed).
* A repeat under a request key answers each batch from that batch's receipt: a
  repeat whose batches are cut differently (another ``batch_size``, other jobs)
  would be answered with other jobs' ids and push jobs that are in the queue
  already. The client refuses it at the first batch whose answer does not match
  it, before anything more is pushed.

Real broker processes on a file store; every test reads the store itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.errors import BrokerUnavailable, InvalidRequest, QueueFull, RequestKeyReused
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess
from tests.support.transports import DropReplyOf

PAD = "x" * 5000  # eight such jobs fit a 64 KiB queue object, sixteen do not


@pytest.fixture()
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture()
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(f"file://{store_dir}") as proc:
        yield proc


def _jobs(store_dir: Path) -> list[tuple[str, Any]]:
    """(id, payload) of every job in the queue object, in enqueue order."""
    state = decode_state(FileStore(store_dir).read(paths.state_key("q")).data)
    return [(j.id, orjson.loads(j.payload)) for j in sorted(state.jobs.values(),
                                                             key=lambda j: j.seq)]


def _ns(store_dir: Path) -> list[int]:
    return [payload["n"] for _, payload in _jobs(store_dir)]


def test_a_full_queue_refusing_a_later_batch_reports_the_batches_that_landed(
        broker: BrokerProcess, store_dir: Path) -> None:
    client = QueueClient(broker.url, "q", retry_s=0)
    client.create(max_state_bytes=64 * 1024)
    jobs = [{"n": n, "pad": PAD} for n in range(20)]
    with pytest.raises(QueueFull) as info:
        client.push_many(jobs, batch_size=8)
    err = info.value
    assert _ns(store_dir) == list(range(8))  # batch 0 landed, batch 1 was refused
    assert err.details["pushed"] == 8
    assert err.details["ids"] == [i for i, _ in _jobs(store_dir)]
    assert "the first 8 job(s)" in err.message
    assert err.request_key is None  # the outcome is known: nothing to repeat by key

    # the caller makes room and pushes what is left: each job once
    client.create(max_state_bytes=1 << 20)
    rest = client.push_many(jobs[err.details["pushed"]:], batch_size=8)
    assert _ns(store_dir) == list(range(20))
    assert [i for i, _ in _jobs(store_dir)] == [*err.details["ids"], *rest]
    client.close()


def test_a_bad_job_in_a_later_batch_reports_the_batches_that_landed(
        broker: BrokerProcess, store_dir: Path) -> None:
    client = QueueClient(broker.url, "q", retry_s=0)
    jobs: list[Any] = [{"n": n} for n in range(7)]
    jobs[4] = {"payload": {"n": 4}, "max_attempts": 0}  # refused before batch 1 is sent
    with pytest.raises(InvalidRequest) as info:
        client.push_many(jobs, batch_size=3)
    assert info.value.details["pushed"] == 3 and "max_attempts" in info.value.message
    assert _ns(store_dir) == [0, 1, 2]
    jobs[4] = {"payload": {"n": 4}}  # fixed: push the rest
    client.push_many(jobs[info.value.details["pushed"]:], batch_size=3)
    assert _ns(store_dir) == list(range(7))
    client.close()


def test_a_refusal_of_the_first_batch_reports_nothing_pushed(
        broker: BrokerProcess, store_dir: Path) -> None:
    client = QueueClient(broker.url, "q", retry_s=0)
    with pytest.raises(InvalidRequest) as info:
        client.push_many([{"payload": 1, "max_attempts": 0}, {"n": 1}], batch_size=3)
    assert "pushed" not in info.value.details and "ids" not in info.value.details
    client.close()


def test_a_repeat_cut_into_other_batches_is_refused_and_pushes_nothing(
        broker: BrokerProcess, store_dir: Path) -> None:
    jobs = [{"n": n} for n in range(7)]
    client = QueueClient(broker.url, "q", retry_s=0, transport=DropReplyOf(2))
    with pytest.raises(BrokerUnavailable) as info:
        client.push_many(jobs, batch_size=3, request_key="orders-7")
    assert _ns(store_dir) == list(range(6))  # batches 0 and 1 landed, 2 was not sent
    before = FileStore(store_dir).get(paths.state_key("q"))

    for batch_size in (2, 4):  # batch 0's receipt holds 3 other jobs: not this push's
        with pytest.raises(RequestKeyReused, match=r"used for other jobs.*batch 0 ") as bad:
            client.push_many(jobs, batch_size=batch_size, request_key=info.value.request_key)
        assert "batch_size" in bad.value.message
        assert FileStore(store_dir).get(paths.state_key("q")) == before  # nothing pushed
    # the same cut repeats as documented: the six that landed answered, one pushed
    ids = client.push_many(jobs, batch_size=3, request_key="orders-7")
    assert _ns(store_dir) == list(range(7))
    assert [i for i, _ in _jobs(store_dir)] == ids
    client.close()


def test_a_request_key_reused_for_other_jobs_does_not_drop_them(
        broker: BrokerProcess, store_dir: Path) -> None:
    client = QueueClient(broker.url, "q", retry_s=0)
    first = client.push_many([{"n": n} for n in range(3)], request_key="orders-2026-11-28")
    try:  # the same key for the next day's jobs: refused, the caller hears of it
        with pytest.raises(RequestKeyReused, match="'orders-2026-11-28' was used for other"):
            client.push_many([{"n": n} for n in range(3, 6)], request_key="orders-2026-11-28")
        assert _ns(store_dir) == list(range(3))  # nothing pushed, nothing answered falsely
        # the same jobs again under it: a true repeat, answered the first ids
        assert client.push_many([{"n": n} for n in range(3)],
                                request_key="orders-2026-11-28") == first
        assert _ns(store_dir) == list(range(3))
    finally:
        client.close()
