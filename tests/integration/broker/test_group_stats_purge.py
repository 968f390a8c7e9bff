"""``GET stats`` of a queue that uses groups agrees with its jobs after a
purge and after cancels, through a real broker process: the groups block
counts no pending job once every pending job is purged (inline ones and a
grouped segment's), holds back none, and keeps the claimed ones; a cancelled
held-back job leaves ``held_back``. Before: the groups block still counted
the purged and cancelled jobs (until their groups were next served)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import urllib3

from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess
from tests.support.inprocess import stored


def _stats(url: str) -> dict[str, Any]:
    r = urllib3.request("GET", f"{url}/v1/queues/q/stats", retries=False)
    assert r.status == 200, r.data
    out: dict[str, Any] = orjson.loads(r.data)
    return out


def _pending(view: dict[str, Any]) -> dict[str | None, int]:
    return {row["group"]: row["pending"] for row in view["groups"]["busiest"] if row["pending"]}


def _grouped_queue(broker: BrokerProcess,
                   tmp_path: Path) -> tuple[QueueClient, list[str], set[str]]:
    """Queue q at group_limit 1: six jobs inline in groups a and b, twelve by
    reference in a grouped segment in groups c and d, one of each group claimed
    (each at its limit, the rest held back). The client, the inline ids, the
    claimed ids."""
    client = QueueClient(broker.url, "q", retry_s=5)
    client.create(group_limit=1)
    inline = client.push_many([{"payload": {"n": i}, "group": "ab"[i % 2]} for i in range(6)])
    client.push_many([{"payload": {"s": i}, "group": "cd"[i % 2]} for i in range(12)])
    refs = stored(FileStore(tmp_path)).segment_refs
    assert refs and refs[0].groups is not None  # (a grouped segment, by reference)
    claimed = {job.id for job in client.claim("w", 10)}
    assert len(claimed) == 4
    view = _stats(broker.url)
    assert _pending(view) == {"a": 2, "b": 2, "c": 5, "d": 5}
    assert view["groups"]["held_back"] == {"jobs": 14, "groups_at_limit": 4}
    return client, inline, claimed


def test_stats_after_a_purge_show_no_group_pending(tmp_path: Path) -> None:
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", "10",
                       "--lease-s", "3600") as broker:
        client, _, _ = _grouped_queue(broker, tmp_path)
        assert client.purge(["pending"]) == 14
        view = _stats(broker.url)
        assert view["counts"]["pending"] == 0
        assert _pending(view) == {}
        assert view["groups"]["held_back"] == {"jobs": 0, "groups_at_limit": 0}
        assert view["groups"]["claimed"] == 4
        assert stored(FileStore(tmp_path)).segment_refs == []  # (the purge took the segment)


def test_stats_after_a_cancel_of_a_held_back_job_count_it_no_more(tmp_path: Path) -> None:
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", "10",
                       "--lease-s", "3600") as broker:
        client, inline, claimed = _grouped_queue(broker, tmp_path)
        pending_a = [job_id for job_id in inline[::2] if job_id not in claimed]
        assert [a.ok for a in client.cancel(pending_a[:1])] == [True]
        view = _stats(broker.url)
        assert view["counts"]["pending"] == 13
        assert _pending(view) == {"a": 1, "b": 2, "c": 5, "d": 5}
        assert view["groups"]["held_back"] == {"jobs": 13, "groups_at_limit": 4}
