"""The ``osqueue`` CLI against an in-process broker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.http.server import BrokerServer
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
    assert main(["--broker", broker.url, "--queue", "cli2", "push", "--file", str(bad)]) == 2
    assert "osqueue push: line 2 is not JSON" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["push", '{"a": 1}', "{oops"],
    ["push", "--file", "/nonexistent/jobs.jsonl"],
    ["push"],
])
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """No broker is needed to refuse them, and nothing is pushed (the URL is unreachable)."""
    assert main(["--broker", "http://127.0.0.1:9", "--queue", "x", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("osqueue push: ")
    assert "Traceback" not in err


def test_tables_show_data_as_text_and_json_stays_plain(broker: BrokerServer,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--broker", broker.url, "--queue", "cli3"]
    assert main([*base, "push", '"[bold]not markup[/bold]"', '{"x": "' + "y" * 200 + '"}']) == 0
    capsys.readouterr()
    assert main([*base, "jobs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["id", "status", "prio", "attempts", "run_at", "worker", "payload",
                              "last_error"]
    assert len(out) == 4 and '"[bold]not markup[/bold]"' in out[2]  # never wrapped or styled
    assert '{"x": "' + "y" * 40 + "..." in out[3]  # long payloads cut to 50 characters
    assert main([*base, "jobs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["payload"] == "[bold]not markup[/bold]"
    assert main([*base, "stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 2
