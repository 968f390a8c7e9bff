"""``push_partition`` keys: stable under a retried task that sees its rows in another order.

The function ``push_partition`` returns is called directly on lists of Rows
(outside a Spark task its partition id is 0), so the test, not Spark's
scheduler, decides the order each attempt sees.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row

from broker.http.server import BrokerServer
from osqueue_spark import QueueClient, push_partition, start_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    store_dir: Path = tmp_path_factory.mktemp("sink-store")
    with start_broker(f"file://{store_dir}", lease_s=30, backoff_base_s=0.05) as b:
        yield b


def qname() -> str:
    return f"sink-{uuid.uuid4().hex[:8]}"


class AttemptDied(RuntimeError):
    pass


def dies_after(rows: list[Any], n: int) -> Iterator[Any]:
    """The rows a task attempt reads before it dies: the first ``n``, then an error."""
    yield from rows[:n]
    raise AttemptDied(f"task attempt died after {n} rows")


def content(job: dict[str, Any]) -> str:
    return json.dumps([job["payload"], job["priority"]], sort_keys=True)


def row_content(row: Row) -> str:
    return json.dumps([json.loads(row["payload"]), row["priority"]], sort_keys=True)


def test_retry_in_another_order_pushes_each_row_once(broker: BrokerServer) -> None:
    a = Row(payload='{"doc": "A"}', priority=0)
    b = Row(payload='{"doc": "B"}', priority=0)
    c = Row(payload='{"doc": "C"}', priority=0)
    d = Row(payload='{"doc": "D"}', priority=0)
    b_urgent = Row(payload='{"doc": "B"}', priority=9)  # same payload, other options
    rows = [a, b, c, a, d, b_urgent]  # A twice: two jobs, whatever the order
    q = qname()
    push = push_partition(broker=broker.url, queue=q, key_prefix=f"t-{q}", batch_size=1)

    with pytest.raises(AttemptDied):  # attempt 1 pushes A and B, then dies
        push(dies_after(rows, 2))
    client = QueueClient(broker.url, q)
    assert Counter(content(j) for j in client.iter_jobs()) == Counter(
        row_content(r) for r in rows[:2])

    retry: Iterable[Any] = [c, a, d, b_urgent, b, a]  # the shuffle hands the rows over reordered
    push(iter(retry))
    jobs = list(client.iter_jobs())
    assert Counter(content(j) for j in jobs) == Counter(row_content(r) for r in rows)
    assert len({j["key"] for j in jobs}) == len(rows)
    stats = client.stats()
    assert stats["enqueued_total"] == len(rows) and stats["counts"]["pending"] == len(rows)

    push(iter(reversed(rows)))  # a third attempt, yet another order: nothing new
    assert client.stats()["enqueued_total"] == len(rows)


def test_a_row_with_its_own_key_keeps_it(broker: BrokerServer) -> None:
    q = qname()
    push = push_partition(broker=broker.url, queue=q, batch_size=10)
    push(iter([Row(payload='{"n": 1}', key="mine"), Row(payload='{"n": 1}', key=None)]))
    jobs = sorted(QueueClient(broker.url, q).iter_jobs(), key=lambda j: j["key"] != "mine")
    assert len(jobs) == 2 and jobs[0]["key"] == "mine"
    assert jobs[1]["key"] is not None and jobs[1]["key"] != "mine"
    push(iter([Row(payload='{"n": 2}', key="mine")]))  # the key decides, not the content
    assert QueueClient(broker.url, q).stats()["enqueued_total"] == 2
