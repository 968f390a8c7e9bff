"""osqueue_spark.retries: a call whose answer was lost is never cut short by the
first-contact rule. A client whose brokers have not answered in this process
(a Spark driver's commit, a new Python worker's first task) sends a call; the
broker commits it and the answer is lost (the relay in front of the real broker
process drops the connection, then refuses connections for longer than
FIRST_CONTACT_S, as a broker killed after its commit and restarted would). The
call must be retried until a broker answers it: raising "nothing listens at
URL" made a Spark write fail although its jobs were published (a rerun of the
write enqueues them twice) and named a cause that was false. The store is
checked afterwards: each job once, nothing left staged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import QueueClient
from osqueue_spark.bodies import job_staged_line
from osqueue_spark.retries import FIRST_CONTACT_S, answered_before
from tests.support.broker_process import BrokerProcess
from tests.support.broker_relay import BrokerRelay

DOWN_S = FIRST_CONTACT_S + 2


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(f"file://{tmp_path}").start()
    try:
        yield b
    finally:
        b.stop()


def stored_payloads(root: Path, queue: str) -> list[object]:
    state = decode_state(FileStore(root).read(paths.state_key(queue)).data)
    return sorted((orjson.loads(j.payload) for j in state.jobs.values()), key=str)


def test_a_push_whose_answer_was_lost_at_first_contact_is_retried_until_answered(
        broker: BrokerProcess, tmp_path: Path) -> None:
    with BrokerRelay(broker.url) as relay:
        client = QueueClient(relay.url, "q", retry_s=60)
        assert not answered_before([relay.url])  # first contact of this process
        relay.cut_next("POST", "/v1/queues/q/push", DOWN_S)
        [job_id] = client.push_many(["once"])
        assert relay.lost.is_set() and relay.lost_status == 200  # it had landed
        assert relay.back.is_set()  # answered only once the relay listened again
    state = decode_state(FileStore(tmp_path).read(paths.state_key("q")).data)
    assert {j.id: orjson.loads(j.payload) for j in state.jobs.values()} == {job_id: "once"}


def test_a_publish_whose_answer_was_lost_at_first_contact_publishes_once(
        broker: BrokerProcess, tmp_path: Path) -> None:
    """As a Spark write's commit: tasks staged through the broker's URL, the
    driver (which never called a broker) publishes through the relay."""
    stager = QueueClient(broker.url, "q")
    prefix = "w-lost-answer/"
    keep = []
    for task in range(3):
        write_id = f"{prefix}p{task}-t{task}-c0"
        lines = b"".join(job_staged_line({"payload": {"task": task, "n": n}}) for n in range(4))
        assert stager.stage_lines(write_id, lines) == 4
        keep.append(write_id)
    stager.stage_lines(f"{prefix}p0-t9-c0", job_staged_line({"payload": "failed attempt"}))
    with BrokerRelay(broker.url) as relay:
        driver = QueueClient(relay.url, "q", retry_s=60)
        relay.cut_next("POST", "/v1/queues/q/publish", DOWN_S)
        out = driver.publish(prefix, keep, once=f"write:{prefix}")
        assert relay.lost.is_set() and relay.lost_status == 200 and relay.back.is_set()
    assert out["duplicate"] is True  # the repeat learnt that the first one landed
    assert stored_payloads(tmp_path, "q") == sorted(
        ({"task": t, "n": n} for t in range(3) for n in range(4)), key=str)
    store = FileStore(tmp_path)
    assert not list(store.list(paths.staging_prefix("q")))
