"""Group limits through real broker processes over HTTP: ``group_limit`` set by
``PUT`` (the client's ``create``) and the CLI's ``configure``; claims never
hand out a job of a group at its limit and take the next eligible job; the
owner killed with ``SIGKILL``, a second broker takes the queue over and
rebuilds the held counts from the landed head: the limit still holds, a
settlement frees a place for the group's oldest pending job; the store holds
every job once. Bad group settings are refused (422 ``invalid_request``) and
leave the store byte for byte as it was."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest
import urllib3

from broker import paths
from broker.model.format.decode import decode_state
from broker.model.groups.counts import held_by_group
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.store_files import store_files

LEASE_S = 2.0




def _head(root: Path):  # type: ignore[no-untyped-def]
    return decode_state(FileStore(root).read(paths.state_key("q")).data)


def test_the_limit_holds_across_a_takeover(tmp_path: Path) -> None:
    store = f"file://{tmp_path}"
    first = BrokerProcess(store, "--lease-s", str(LEASE_S)).start()
    second = BrokerProcess(store, "--lease-s", str(LEASE_S)).start()
    try:
        client = QueueClient([first.url, second.url], "q", retry_s=60)
        assert client.create(group_limit=2)["settings"]["group_limit"] == 2
        ids = client.push_many([{"payload": {"n": i}, "group": "g"} for i in range(6)] +
                               [{"payload": {"n": 10 + i}, "group": "h"} for i in range(3)] +
                               [{"n": 20}, {"n": 21}])
        got = client.claim("w", 20, lease_s=300)
        assert Counter(j.group for j in got) == {"g": 2, "h": 2, None: 2}
        assert [j.id for j in got if j.group == "g"] == ids[:2]  # oldest first
        assert client.claim("w", 20, lease_s=300) == []

        owner = _head(tmp_path).broker.url
        (first if first.url == owner else second).stop(signal.SIGKILL)
        survivor = second if first.url == owner else first

        def taken_over() -> bool:
            client.stats()  # (a call: the survivor takes the queue over once its lease ran out)
            record = _head(tmp_path).broker
            return record is not None and record.url == survivor.url

        eventually(taken_over, 60, "the takeover")
        assert client.claim("w", 20, lease_s=300) == []  # counts rebuilt: g and h at 2

        g_token = next(j.token for j in got if j.group == "g")
        assert client.complete(g_token).ok  # a token from before the takeover
        again = client.claim("w", 20, lease_s=300)
        assert [(j.id, j.group) for j in again] == [(ids[2], "g")]  # g's oldest pending

        head = _head(tmp_path)
        held = held_by_group(head.claim_records.values(), head.jobs)
        assert held == {"g": 2, "h": 2, None: 2}
        seen = [job.id for job in head.jobs.values()]
        assert len(seen) == len(set(seen)) == len(ids)  # every job once (none archived yet
        assert sorted(seen) == sorted(ids)  # but the completed one, still in the head)
    finally:
        for proc in (first, second):
            proc.stop(signal.SIGKILL)


@pytest.fixture()
def broker(tmp_path: Path):  # type: ignore[no-untyped-def]
    with BrokerProcess(f"file://{tmp_path}", "--lease-s", "3600") as proc:
        yield proc


@pytest.mark.parametrize("settings, says", [
    ({"group_limit": -1}, "group_limit"),
    ({"group_limit": "2"}, "group_limit"),
    ({"group_limits": {"a": 1.5}}, "group_limits"),
    ({"group_weights": {"a": 0}}, "group_weights"),
    ({"group_weights": {"\u0001": 2}}, "group_weights"),
    ({"group_order": "fifo"}, "group_order fifo allows one claimed job per group; group_limit"),
    ({"group_order": "fifo", "group_limit": 1, "group_limits": {"a": 4}}, "group_limits"),
    ({"group_dead": "never"}, "group_dead"),
    ({"group_rate_per_s": "1"}, "group_rate_per_s"),
    ({"group_burst": -1}, "group_burst"),
    ({"group_rate_per_s": -1}, "group_rate_per_s"),
    ({"group_burst": 2.5}, "group_burst"),
])
def test_a_bad_group_setting_is_refused_and_changes_nothing(
        broker: BrokerProcess, tmp_path: Path, settings: dict[str, object], says: str) -> None:
    client = QueueClient(broker.url, "q")
    client.create(group_limit=3, group_weights={"b": 2})
    client.push_many([{"payload": 1, "group": "b"}, 2])
    before = store_files(tmp_path)
    r = urllib3.request("PUT", f"{broker.url}/v1/queues/q", retries=False,
                        body=orjson.dumps({"settings": settings}),
                        headers={"content-type": "application/json"})
    assert r.status == 422, r.data
    assert r.json()["code"] == "invalid_request" and says in r.json()["error"], r.data
    assert store_files(tmp_path) == before
    assert client.stats()["settings"]["group_limit"] == 3


def test_the_cli_configures_group_settings(broker: BrokerProcess, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "osqueue_spark.cli", "--broker", broker.url,
                          "--queue", "q", "--json", "configure", "group_limit=2",
                          "group_limits.a=5", "group_limits.b=null", "group_weights.c=3"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    settings = orjson.loads(out.stdout)["settings"]
    assert settings["group_limit"] == 2
    assert settings["group_limits"] == {"a": 5, "b": None}
    assert settings["group_weights"] == {"c": 3}
    head = (tmp_path / "q" / "queue.json").read_bytes()
    assert head.startswith(b'{"format":"osqueue","version":6,')
    assert b'"group_limits":{"a":5,"b":null}' in head


def test_stats_and_metrics_show_what_the_limit_holds_back(broker: BrokerProcess) -> None:
    client = QueueClient(broker.url, "q")
    client.create(group_limit=1)
    client.push_many([{"payload": i, "group": "a"} for i in range(3)] +
                     [{"payload": 9, "group": "b"}])
    assert sorted(j.group or "" for j in client.claim("w", 10)) == ["a", "b"]
    block = client.stats()["groups"]
    assert block["claimed"] == 2
    assert block["held_back"] == {"jobs": 2, "groups_at_limit": 1}
    assert block["busiest"][0] == {"group": "a", "claimed": 1, "pending": 2, "limit": 1,
                                   "weight": 1, "state": "at_limit"}
    metrics = urllib3.request("GET", f"{broker.url}/metrics").data.decode()
    assert 'osqueue_group_held_back_jobs{queue="q"} 2.0' in metrics
    assert 'osqueue_groups_at_limit{queue="q"} 1.0' in metrics
