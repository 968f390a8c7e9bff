"""The ``osqueue`` CLI against an in-process broker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.server import BrokerServer
from osqueue_spark import QueueClient, start_broker
from osqueue_spark.cli import main


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    with start_broker(f"file://{tmp_path_factory.mktemp('cli')}") as b:
        yield b


def test_push_stats_jobs_redrive_purge(broker: BrokerServer, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--broker", broker.url, "--queue", "cli"]
    assert main([*base, "push", '{"a": 1}', '{"a": 2}']) == 0
    f = tmp_path / "jobs.jsonl"
    f.write_text("\n".join(json.dumps({"n": i}) for i in range(2500)) + "\n")
    assert main([*base, "push", "--file", str(f), "--batch-size", "1000",
                 "--key-prefix", "file-"]) == 0
    assert main([*base, "push", "--file", str(f), "--key-prefix", "file-"]) == 0  # re-run
    out = capsys.readouterr()
    assert "pushed 2,500/2,500" in out.err and "pushed 2500 job(s)" in out.out
    client = QueueClient(broker.url, "cli")
    assert client.stats()["total"] == 2502  # keys made the re-run a no-op
    assert main([*base, "stats"]) == 0
    assert "pending" in capsys.readouterr().out
    assert main([*base, "peek"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["id", "status", "prio"] and len(lines) == 12
    assert main([*base, "purge"]) == 2  # refuses without --yes
    assert client.stats()["total"] == 2502
    assert main([*base, "purge", "--yes"]) == 0
    assert client.stats()["total"] == 0
    assert main([*base, "redrive"]) == 0
    assert main([*base, "pause"]) == 0 and client.stats()["paused"]
    assert main([*base, "resume"]) == 0 and not client.stats()["paused"]


def test_errors_are_clear(broker: BrokerServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OSQUEUE_BROKER", raising=False)
    assert main(["--queue", "x", "stats"]) == 2
    assert "no broker" in capsys.readouterr().err
    assert main(["--broker", broker.url, "--queue", "never-made", "stats"]) == 1
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ok": 1}\nnot json\n')
    with pytest.raises(SystemExit, match="line 2 is not JSON"):
        main(["--broker", broker.url, "--queue", "cli2", "push", "--file", str(bad)])
