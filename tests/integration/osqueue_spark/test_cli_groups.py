"""``osqueue configure`` sets the group settings (``group_limit``, entries of
``group_limits`` and ``group_weights`` as ``NAME.GROUP=N``), which claims then
honour; a value that is not JSON is refused rather than sent as null (which
would set the limit back to unlimited); ``osqueue stats`` shows what the limits
hold back and the busiest groups. Against a real broker over a file store."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest

from broker.http.server import BrokerServer
from osqueue_spark import QueueClient, start_broker
from osqueue_spark.cli import main


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    with start_broker(f"file://{tmp_path_factory.mktemp('cli-groups')}") as b:
        yield b


def test_configure_sets_group_limits_and_weights_that_claims_honour(
        broker: BrokerServer, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--broker", broker.url, "--queue", "cli-groups"]
    assert main([*base, "configure", "group_limit=2", "group_limits.key-a=1",
                 "group_limits.key-b=null", "group_weights.key-b=3", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert settings["group_limit"] == 2
    assert settings["group_limits"] == {"key-a": 1, "key-b": None}
    assert settings["group_weights"] == {"key-b": 3}
    client = QueueClient(broker.url, "cli-groups")
    for group in ("key-a", "key-b", "key-c"):
        client.push_many([{"group": group, "payload": n} for n in range(4)])
    held = Counter(job.group for job in client.claim("w", 12))
    assert held == {"key-a": 1, "key-b": 4, "key-c": 2}
    assert main([*base, "stats"]) == 0
    out = capsys.readouterr().out
    assert "held back by group limits" in out and "groups at their limit" in out
    assert "group key-a" in out and "1 claimed / limit 1, 3 pending" in out


def test_configure_refuses_a_group_limit_that_is_not_json(
        broker: BrokerServer, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--broker", broker.url, "--queue", "cli-groups-bad"]
    assert main([*base, "configure", "group_limit=2"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main([*base, "configure", "group_limit=two"])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith("group_limit: not a number: 'two'\n")
    assert QueueClient(broker.url, "cli-groups-bad").stats()["settings"]["group_limit"] == 2
