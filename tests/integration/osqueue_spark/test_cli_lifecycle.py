"""The ``osqueue`` CLI runs a job's life (osqueue_spark.cli_jobs: job, claim,
complete, fail, heartbeat), says its version, splits ``push --file`` by bytes
and says what to do when a request is still too large, refuses https against
a plain broker at once, takes a local directory as ``--store``, and gives
every option a help text."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker import paths
from broker.http.server import BrokerServer
from osqueue_spark import QueueClient, start_broker
from osqueue_spark.cli import build_parser, main
from tests.support.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    with start_broker(f"file://{tmp_path_factory.mktemp('life')}") as b:
        yield b


def _lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_claim_heartbeat_complete_and_fail_by_token(broker: BrokerServer,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--broker", broker.url, "--queue", "life"]
    assert main([*base, "configure", "max_attempts=1"]) == 0
    assert "applies to jobs pushed from now on" in capsys.readouterr().out
    assert main([*base, "push", '{"n": 1}', '{"n": 2}', '{"n": 3}']) == 0
    capsys.readouterr()
    assert main([*base, "claim", "--max-jobs", "2", "--worker", "cli-w", "--lease-s", "60"]) == 0
    out = capsys.readouterr()
    one, two = _lines(out.out)  # one JSON line a job
    assert (one["id"], one["payload"], two["payload"]) == ("j0000000001", {"n": 1}, {"n": 2})
    assert "claimed 2 job(s)" in out.err
    tokens = [str(one["token"]), str(two["token"])]
    assert main([*base, "heartbeat", *tokens, "--lease-s", "90"]) == 0
    assert capsys.readouterr().out.count("lease extended to 90 s") == 2
    assert main([*base, "complete", tokens[0], "--result", '{"pages": 12}']) == 0
    assert capsys.readouterr().out == "j0000000001: completed\n"
    assert main([*base, "complete", tokens[0], "--result", '{"pages": 12}']) == 0  # (a repeat)
    assert main([*base, "fail", tokens[1], "--error", "no such file"]) == 0
    assert "j0000000002: dead" in capsys.readouterr().out
    assert main([*base, "--json", "job", "j0000000002"]) == 0
    job = json.loads(capsys.readouterr().out)
    assert (job["status"], job["last_error"]) == ("dead", "no such file")
    assert main([*base, "job", "j0000000001"]) == 0
    shown = capsys.readouterr().out
    assert 'result: {"pages":12}' in shown and "completed" in shown
    # a stale token: said per token, without the token, exit status 1
    assert main([*base, "complete", tokens[1]]) == 1
    err = capsys.readouterr().err
    assert "osqueue complete: j0000000002:" in err and tokens[1] not in err
    assert main([*base, "job", "j0000000999"]) == 1
    assert "[job_not_found]" in capsys.readouterr().err
    assert main([*base, "--json", "claim"]) == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)["jobs"]] == ["j0000000003"]
    assert main([*base, "claim"]) == 0
    assert "no job to claim in life" in capsys.readouterr().err


def test_job_shows_the_error_history_oldest_first_and_json_the_api_form(
        broker: BrokerServer, capsys: pytest.CaptureFixture[str]) -> None:
    """A job failed three times (dead): ``osqueue job`` shows one line a failure,
    its attempt, time and text's first line, the newest last; ``--json`` is
    the broker's job view, each text whole. A job that never failed shows no
    history."""
    base = ["--broker", broker.url, "--queue", "hist"]
    assert main([*base, "configure", "max_attempts=3"]) == 0
    assert main([*base, "push", '{"n": 1}']) == 0
    capsys.readouterr()
    for attempt in (1, 2, 3):
        assert main([*base, "claim", "--worker", "cli-w"]) == 0
        [job] = _lines(capsys.readouterr().out)
        assert job["id"] == "j0000000001"
        assert main([*base, "fail", str(job["token"]), "--retry-in-s", "0",
                     "--error", f"ValueError: try {attempt}\nTraceback (most recent call last):"
                                "\n  File \"w.py\""]) == 0
        said = capsys.readouterr().out
        assert ("j0000000001: dead" in said) == (attempt == 3)
    view = QueueClient(broker.url, "hist").job("j0000000001")
    assert [e["attempt"] for e in view["errors"]] == [1, 2, 3]
    assert main([*base, "--json", "job", "j0000000001"]) == 0
    assert json.loads(capsys.readouterr().out)["errors"] == view["errors"]
    assert main([*base, "job", "j0000000001"]) == 0
    shown = capsys.readouterr().out.splitlines()
    at = shown.index("errors, oldest first (each text whole: --json):")
    assert shown[at + 1].split() == ["attempt", "failed_at", "error"]
    assert [line.split(None, 2) for line in shown[at + 3:]] == [
        [str(e["attempt"]), e["failed_at"], f"ValueError: try {e['attempt']} (+2 more lines)"]
        for e in view["errors"]]
    assert not any(line.startswith("errors ") for line in shown[:at])  # (not in the table)
    assert main([*base, "push", '{"n": 2}']) == 0
    capsys.readouterr()
    assert main([*base, "job", "j0000000002"]) == 0
    assert "errors" not in capsys.readouterr().out


def test_version_comes_from_the_package(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"osqueue {importlib.metadata.version('osqueue-spark')}\n"


def test_every_option_and_argument_has_help() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in [("osqueue", parser), *sub.choices.items()]:
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{name}: {action.option_strings or action.dest} has no help"


def test_push_file_splits_by_bytes_and_says_what_to_do_when_too_large(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A broker taking 1 MiB requests: 3 MB of jobs in one request is refused,
    nothing written, and the error names --batch-bytes; split by bytes, they go."""
    root = tmp_path / "store"
    root.mkdir()
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"n": i, "blob": "b" * 100_000}) + "\n"
                            for i in range(30)))
    with BrokerProcess(f"file://{root}", "--max-request-mb", "1") as broker:
        base = ["--broker", broker.url, "--queue", "big"]
        before = sorted(p for p in root.rglob("*"))
        assert main([*base, "push", "--file", str(jobs), "--batch-bytes", "4000000"]) == 1
        err = capsys.readouterr().err
        assert "[payload_too_large]" in err and "--batch-bytes" in err and err.count("\n") == 1
        assert sorted(p for p in root.rglob("*")) == before  # nothing written
        assert main([*base, "push", "--file", str(jobs), "--batch-bytes", "400000"]) == 0
        assert QueueClient(broker.url, "big").stats()["counts"]["pending"] == 30


def test_push_file_of_big_payloads_keeps_the_head_small(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """400 jobs of 200 KB: requests of 8 MiB, each into segment objects."""
    jobs = tmp_path / "jobs.jsonl"
    with jobs.open("w") as fh:
        for i in range(400):
            fh.write(json.dumps({"n": i, "blob": "z" * 200_000}) + "\n")
    root = tmp_path / "store"
    with start_broker(f"file://{root}") as broker:
        assert main(["--broker", broker.url, "--queue", "big", "push", "--file", str(jobs)]) == 0
        assert "pushed 400 job(s)" in capsys.readouterr().out
        assert os.path.getsize(root / paths.state_key("big")) < 1_000_000
        assert QueueClient(broker.url, "big").stats()["counts"]["pending"] == 400


def test_https_against_a_plain_broker_fails_at_once_and_says_so(
        broker: BrokerServer, capsys: pytest.CaptureFixture[str]) -> None:
    url = broker.url.replace("http://", "https://")
    started = time.monotonic()
    assert main(["--broker", url, "--queue", "life", "stats"]) == 1
    # (on today's main: retried for the client's 10 s, then "broker unavailable")
    assert time.monotonic() - started < 5.0
    err = capsys.readouterr().err
    plain = broker.url.removesuffix("/")
    assert f"does not speak TLS (try {plain})" in err and "[tls_failed]" in err


def test_store_takes_a_local_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``--store ./data``: the queue's owner is found from the directory when the
    broker given cannot be reached; a directory that is not there is refused."""
    root = tmp_path / "data"
    with start_broker(f"file://{root}") as b:
        QueueClient(b.url, "local").push(1)
        monkeypatch.chdir(tmp_path)
        dead = "http://127.0.0.1:9"
        assert main(["--broker", dead, "--store", "./data", "--queue", "local", "--json",
                     "stats"]) == 0
        assert json.loads(capsys.readouterr().out)["counts"]["pending"] == 1
        assert main(["--broker", dead, "--store", "./nothing", "--queue", "local",
                     "stats"]) == 2
        err = capsys.readouterr().err
        assert "neither a store URL" in err and err.count("\n") == 1
