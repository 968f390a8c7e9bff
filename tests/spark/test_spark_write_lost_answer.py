"""A Spark write whose publish was committed by the broker but whose answer was
lost (the broker process unreachable for longer than the first-contact bound
right after): the write's commit, in a Python process of the driver that
never called this broker before, retries the once-keyed publish until a broker
answers, and the write succeeds with every row enqueued once. It raised
"nothing listens at URL" with the jobs already in the queue, so a rerun of the
failed write enqueued them all a second time."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark.retries import FIRST_CONTACT_S
from tests.support.broker_process import BrokerProcess
from tests.support.broker_relay import BrokerRelay

pytestmark = pytest.mark.spark


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(f"file://{tmp_path}").start()
    try:
        yield b
    finally:
        b.stop()


def test_a_write_whose_publish_answer_was_lost_succeeds_with_each_row_once(
        spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    q = f"lost-{uuid.uuid4().hex[:8]}"
    df = spark.range(0, 24, 1, 3).selectExpr("to_json(named_struct('n', id)) AS payload")
    with BrokerRelay(broker.url) as relay:
        relay.cut_next("POST", f"/v1/queues/{q}/publish", FIRST_CONTACT_S + 2)
        (df.write.format("osqueue").option("broker", relay.url).option("queue", q)
         .mode("append").save())
        assert relay.lost.is_set() and relay.lost_status == 200  # published, answer lost
    store = FileStore(tmp_path)
    state = decode_state(store.read(paths.state_key(q)).data)
    payloads = sorted(orjson.loads(j.payload)["n"] for j in state.jobs.values())
    assert payloads == list(range(24))
    assert not list(store.list(paths.staging_prefix(q)))
