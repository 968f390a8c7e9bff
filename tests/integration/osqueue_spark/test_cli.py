"""The ``osqueue`` CLI against an in-process broker."""

from __future__ import annotations

import json
import socket
import time
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
    assert "pushed 2,500/2,500" in out.err and "pushed 2500 keyed job(s)" in out.out
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


def test_json_output_keeps_payload_numbers_exact(broker: BrokerServer,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``jobs --json`` prints a payload's numbers as the broker holds them: an integer
    past 64 bits and a decimal a double would round (it printed them through a float)."""
    base = ["--broker", broker.url, "--queue", "cli-exact"]
    assert main([*base, "push", '{"big": 18446744073709551617, "dec": 0.1000000000000000055511}'
                 ]) == 0
    capsys.readouterr()
    assert main([*base, "jobs", "--json"]) == 0
    out = capsys.readouterr().out
    assert "18446744073709551617" in out and "0.1000000000000000055511" in out
    assert json.loads(out)[0]["payload"]["big"] == 18446744073709551617


ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m"  # window title, clear screen, a C1 CSI


def test_control_characters_are_escaped_in_tables_and_json_keeps_them_exact(
        broker: BrokerServer, capsys: pytest.CaptureFixture[str]) -> None:
    """A worker name and a last_error holding terminal escapes reached the terminal raw."""
    base = ["--broker", broker.url, "--queue", "cli-esc"]
    client = QueueClient(broker.url, "cli-esc")
    client.push({"text": ESCAPES})
    job = client.claim("w" + ESCAPES, lease_s=600)[0]
    client.fail(job.token, "boom" + ESCAPES + "\nsecond line", retry_in_s=600)
    client.push(2)
    client.claim("w" + ESCAPES, lease_s=600)
    capsys.readouterr()
    assert main([*base, "jobs"]) == 0
    out = capsys.readouterr().out
    assert not [c for c in out if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0]
    assert "w\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m" in out and "boom\\x1b]0;pwned" in out
    assert len(out.splitlines()) == 4  # the header, its rule and one line per job
    for argv in (["jobs", "--json"], ["--json", "jobs"]):
        assert main([*base, *argv]) == 0
        printed = capsys.readouterr().out
        assert "\x1b" not in printed and "\x9b" not in printed
        listed = {j["id"]: j for j in json.loads(printed)}
        assert listed[job.id]["last_error"] == "boom" + ESCAPES + "\nsecond line"


def test_messages_escape_control_characters(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    name = "OSQ" + ESCAPES
    monkeypatch.delenv(name, raising=False)
    assert main(["--broker", "http://127.0.0.1:9", "--token-env", name, "stats"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "OSQ\\x1b]0;pwned\\x07" in err


@pytest.mark.parametrize("argv", [["--help"], ["push", "--help"], ["jobs", "--help"]])
def test_help_is_plain_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: osqueue" in out
    assert "``" not in out and ":mod:" not in out and ":class:" not in out


def test_json_works_before_and_after_the_command(broker: BrokerServer,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--broker", broker.url, "--queue", "cli-json"]
    assert main([*base, "--json", "push", "1", "2"]) == 0
    pushed = json.loads(capsys.readouterr().out)
    assert pushed["pushed"] == 2 and len(pushed["ids"]) == 2
    for argv in (["--json", "stats"], ["stats", "--json"]):
        assert main([*base, *argv]) == 0
        assert json.loads(capsys.readouterr().out)["total"] == 2
    assert main([*base, "stats"]) == 0
    assert capsys.readouterr().out.lstrip().startswith("queue cli-json")  # a table
    assert main([*base, "--json", "pause"]) == 0
    assert json.loads(capsys.readouterr().out) == {"queue": "cli-json", "paused": True}


@pytest.mark.parametrize("url", ["notaurl", "ftp://host:1", "http://host:99999", "http://[::1",
                                 "http://", "http://127.0.0.1:1,oops"])
def test_a_bad_broker_url_is_one_line_and_exit_2(url: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--broker", url, "--queue", "x", "stats"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("osqueue: --broker wants http(s)://")


@pytest.mark.parametrize("value", [None, ""])
def test_an_unset_token_env_is_exit_2_naming_it(value: str | None, broker: BrokerServer,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``--token-env UNSET`` sent no token, silently."""
    if value is None:
        monkeypatch.delenv("OSQ_CLI_TOKEN", raising=False)
    else:
        monkeypatch.setenv("OSQ_CLI_TOKEN", value)
    assert main(["--broker", broker.url, "--token-env", "OSQ_CLI_TOKEN", "stats"]) == 2
    err = capsys.readouterr().err
    assert err == "osqueue: --token-env names OSQ_CLI_TOKEN, which is unset or empty\n"


def test_jobs_lists_completed_ones_too(broker: BrokerServer,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--broker", broker.url, "--queue", "cli-done", "push", "1"]) == 0
    capsys.readouterr()
    assert main(["--broker", broker.url, "--queue", "cli-done", "jobs", "--status",
                 "completed", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []  # none completed yet


@pytest.mark.parametrize(("argv", "said"), [
    (["push", "--batch-size", "0", "1"], "argument --batch-size: must be > 0, got 0"),
    (["push", "--batch-size", "-1", "1"], "argument --batch-size: must be > 0, got -1"),
    (["push", "--batch-size", "many", "1"], "argument --batch-size: not a whole number: 'many'"),
    (["jobs", "--limit", "0"], "argument --limit: must be > 0, got 0"),
])
def test_counts_must_be_positive(argv: list[str], said: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--broker", "http://127.0.0.1:9", *argv])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith(said + "\n")


def test_redrive_warns_about_ids_it_did_not_redrive(broker: BrokerServer,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--broker", broker.url, "--queue", "cli-redrive"]
    assert main([*base, "push", "1"]) == 0
    capsys.readouterr()
    assert main([*base, "redrive", "j0000000001", "j0000000999"]) == 0
    out = capsys.readouterr()
    assert out.out == "redrove 0 dead job(s) in cli-redrive\n"
    assert out.err == ("osqueue redrive: 2 of the 2 id(s) given were not redriven: not dead, "
                       "or no such job\n")


def test_a_repeated_keyed_push_does_not_claim_new_jobs(broker: BrokerServer,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The answer cannot tell a new keyed job from an existing one: the CLI says so."""
    base = ["--broker", broker.url, "--queue", "cli-keys"]
    for _ in range(2):
        assert main([*base, "push", "--key-prefix", "k-", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == lines[2] and "key already present added nothing" in lines[3]
    assert QueueClient(broker.url, "cli-keys").stats()["total"] == 1


def test_a_broker_that_is_down_is_reported_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    """It took 11-12 s (retried for retry_s) to say "NewConnectionError"."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
        started = time.monotonic()
        assert main(["--broker", nobody, "--queue", "x", "stats"]) == 1
        took = time.monotonic() - started
    err = capsys.readouterr().err
    assert took < 3, took
    assert err == (f"osqueue: cannot reach broker at {nobody}: Connection refused "
                   "(NewConnectionError) [broker_unreachable]\n")


def test_an_answer_that_is_not_the_brokers_json_prints_cleanly(
        broker: BrokerServer, capsys: pytest.CaptureFixture[str]) -> None:
    """A 404 printed as ``HTTP 404: b'Not Found'``."""
    assert main(["--broker", broker.url + "/not-a-broker", "--queue", "x", "stats"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("osqueue: ") and "b'" not in err


def test_cancel_says_per_id_what_became_of_each_job(broker: BrokerServer,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--broker", broker.url, "--queue", "cli-cancel"]
    client = QueueClient(broker.url, "cli-cancel")
    first, second = client.push_many([1, 2])
    client.claim("w", 1)
    assert main([*base, "cancel", first, second]) == 0
    out = capsys.readouterr()
    assert out.out == f"{first}: cancel requested\n{second}: cancelled\n" and out.err == ""
    assert main([*base, "cancel", first, "j0000000999", "--json"]) == 1  # (a repeat: the same)
    out = capsys.readouterr()
    results = json.loads(out.out)["results"]
    assert [(r["id"], r["ok"], r["status"]) for r in results] == [
        (first, True, "cancel_requested"), ("j0000000999", False, "unknown")]
    assert main([*base, "cancel", "j0000000999"]) == 1
    assert capsys.readouterr().err == (
        "osqueue cancel: j0000000999: unknown: no such job\n")
    assert main([*base, "jobs", "--status", "cancelled", "--json"]) == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)] in ([second], [])
    assert main([*base, "stats"]) == 0
    assert "cancelled (all time)" in capsys.readouterr().out


def test_configure_sets_the_dispatch_rate_limit(broker: BrokerServer,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--broker", broker.url, "--queue", "cli-rate"]
    assert main([*base, "configure", "max_claims_per_s=2.5", "claim_burst=3", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert (settings["max_claims_per_s"], settings["claim_burst"]) == (2.5, 3)
    client = QueueClient(broker.url, "cli-rate")
    client.push_many(list(range(10)))
    assert len(client.claim("w", 10)) == 3
    assert main([*base, "stats"]) == 0
    assert "claim limit per s" in capsys.readouterr().out
    assert main([*base, "configure", "max_claims_per_s=-1"]) == 1  # the broker refuses it
    assert "'settings.max_claims_per_s'" in capsys.readouterr().err
    assert client.stats()["settings"]["max_claims_per_s"] == 2.5


@pytest.mark.parametrize(("argv", "said"), [
    (["configure", "max_claims_per_s"], "not NAME=VALUE: 'max_claims_per_s'"),
    (["configure", "max_claims_per_s=fast"], "max_claims_per_s: not a number: 'fast'"),
    (["configure", "claim_burst=true"], "claim_burst: not a number: 'true'"),
])
def test_configure_refuses_what_is_not_a_number_in_one_line(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--broker", "http://127.0.0.1:9", *argv])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith(said + "\n")
