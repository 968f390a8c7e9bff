"""Fifo groups through real broker processes over HTTP: ``group_order: "fifo"``
and ``group_dead: "hold"`` set by ``PUT``; one job of a group at a time, in
push order; a failed job waiting for its retry and a dead job hold their
groups; the owner killed with ``SIGKILL``, a second broker takes the queue
over and rebuilds the order and the holds from the landed head; a redrive
puts the dead job back at its seq, a cancel of the waiting job lets its group
go on; the store holds every job once. The CLI sets the words."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson

from broker import paths
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually

LEASE_S = 2.0


def _head(root: Path):  # type: ignore[no-untyped-def]
    return decode_state(FileStore(root).read(paths.state_key("q")).data)


def test_fifo_order_and_holds_survive_a_takeover(tmp_path: Path) -> None:
    store = f"file://{tmp_path}"
    first = BrokerProcess(store, "--lease-s", str(LEASE_S)).start()
    second = BrokerProcess(store, "--lease-s", str(LEASE_S)).start()
    try:
        client = QueueClient([first.url, second.url], "q", retry_s=60)
        settings = client.create(group_order="fifo", group_dead="hold")["settings"]
        assert settings["group_order"] == "fifo" and settings["group_dead"] == "hold"
        a = client.push_many([{"payload": {"n": i}, "group": "a"} for i in range(4)])
        b = client.push_many([{"payload": {"n": 10}, "group": "b", "max_attempts": 1},
                              {"payload": {"n": 11}, "group": "b"}])
        a.append(client.push_many([{"payload": {"n": 4}, "group": "a", "priority": 9}])[0])
        got = {j.id: j for j in client.claim("w", 20, lease_s=300)}
        assert sorted(got) == sorted([a[0], b[0]])  # one a group, each group's oldest
        assert client.fail(got[a[0]].token, "later", retry_in_s=3600).ok  # waits: holds a
        assert client.fail(got[b[0]].token, "dead").ok  # its one attempt: dead, holds b
        assert client.claim("w", 20, lease_s=300) == []

        owner = _head(tmp_path).broker.url
        (first if first.url == owner else second).stop(signal.SIGKILL)
        survivor = second if first.url == owner else first

        def taken_over() -> bool:
            client.stats()  # (a call: the survivor takes the queue over once its lease ran out)
            record = _head(tmp_path).broker
            return record is not None and record.url == survivor.url

        eventually(taken_over, 60, "the takeover")
        assert client.claim("w", 20, lease_s=300) == []  # the retry and the dead job hold

        assert client.redrive([b[0]]) == 1
        [again] = client.claim("w", 20, lease_s=300)
        assert again.id == b[0]  # back at its seq: b's head again
        assert client.complete(again.token).ok
        [b1] = client.claim("w", 20, lease_s=300)
        assert b1.id == b[1] and client.complete(b1.token).ok

        assert client.cancel([a[0]])[0].ok  # the waiting job cancelled: a goes on
        order = []
        for _ in range(4):
            [job] = client.claim("w", 20, lease_s=300)
            order.append(job.id)
            assert client.complete(job.token).ok
        assert order == a[1:]  # push order, the priority 9 job last
        assert client.claim("w", 20, lease_s=300) == []

        head = _head(tmp_path)
        seen = [job.id for job in head.jobs.values()]
        assert len(seen) == len(set(seen)) and set(seen) <= set(a) | set(b)  # once each
        assert all(job.status in ("completed", "cancelled") for job in head.jobs.values())
        stats = client.stats()
        assert stats["total"] == 0 and stats["enqueued_total"] == len(a) + len(b)
        assert (stats["completed_total"], stats["cancelled_total"]) == (len(a) + len(b) - 1, 1)
    finally:
        for proc in (first, second):
            proc.stop(signal.SIGKILL)


def test_the_cli_sets_the_order_and_the_dead_rule(tmp_path: Path) -> None:
    with BrokerProcess(f"file://{tmp_path}") as broker:
        out = subprocess.run([sys.executable, "-m", "osqueue_spark.cli", "--broker", broker.url,
                              "--queue", "q", "--json", "configure", "group_order=fifo",
                              "group_dead=hold", "group_rate_per_s=2.5", "group_burst=5"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        settings = orjson.loads(out.stdout)["settings"]
        assert (settings["group_order"], settings["group_dead"]) == ("fifo", "hold")
        assert (settings["group_rate_per_s"], settings["group_burst"]) == (2.5, 5)
        head = (tmp_path / "q" / "queue.json").read_bytes()
        assert b'"group_order":"fifo"' in head and b'"group_dead":"hold"' in head
