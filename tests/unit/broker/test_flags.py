"""Broker settings: flags over OSQUEUE_* variables over defaults; bad values; the token."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from broker import cli
from broker.flags import BrokerFlags, problems

TOKEN = "very-s3cret-token-value"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OSQUEUE_"):
            monkeypatch.delenv(name)


def settings(*argv: str) -> BrokerFlags:
    return BrokerFlags.load(vars(cli.build_parser().parse_args(list(argv))))


def test_a_variable_sets_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSQUEUE_STORE", "file:///tmp/q")
    monkeypatch.setenv("OSQUEUE_LEASE_S", "12.5")
    monkeypatch.setenv("OSQUEUE_SELF_TEST", "false")
    monkeypatch.setenv("OSQUEUE_LISTEN", ":9000")
    monkeypatch.setenv("OSQUEUE_INSECURE_NO_TOKEN", "true")
    s = settings()
    assert (s.store, s.lease_s, s.self_test, s.host, s.port, s.insecure_no_token) == (
        "file:///tmp/q", 12.5, False, "0.0.0.0", 9000, True)
    config = s.broker_config()
    assert (config.lease_s, config.self_test, config.max_request_bytes) == (
        12.5, False, 64 * 1024 * 1024)


def test_a_flag_beats_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSQUEUE_STORE", "file:///tmp/env")
    monkeypatch.setenv("OSQUEUE_LEASE_S", "12.5")
    monkeypatch.setenv("OSQUEUE_SELF_TEST", "true")
    s = settings("--store", "file:///tmp/flag", "--lease-s", "3", "--no-self-test",
                 "--max-request-mb", "2")
    assert (s.store, s.lease_s, s.self_test) == ("file:///tmp/flag", 3.0, False)
    assert s.broker_config().max_request_bytes == 2 * 1024 * 1024


def test_defaults_without_flags_or_variables() -> None:
    s = settings("--store", "file:///tmp/q")
    assert (s.host, s.port, s.lease_s, s.commit_timeout_s, s.self_test, s.token) == (
        "127.0.0.1", 8765, 30.0, 30.0, True, None)


@pytest.mark.parametrize(("argv", "env", "named"), [
    (["--store", "file:///tmp/q", "--lease-s", "5000"], {}, "--lease-s (or OSQUEUE_LEASE_S)"),
    (["--store", "file:///tmp/q"], {"OSQUEUE_COMMIT_TIMEOUT_S": "soon"},
     "--commit-timeout-s (or OSQUEUE_COMMIT_TIMEOUT_S)"),
    (["--store", "file:///tmp/q", "--listen", "nowhere"], {}, "--listen (or OSQUEUE_LISTEN)"),
    (["--store", "file:///tmp/q", "--log-level", "loud"], {}, "--log-level"),
    ([], {}, "--store (or OSQUEUE_STORE)"),
    (["--store", "file:///tmp/q", "--token-env", "OSQ_UNSET_FOR_TEST"], {}, "OSQ_UNSET_FOR_TEST"),
    (["--store", "file:///tmp/q", "--listen", "0.0.0.0:0"], {}, "--insecure-no-token"),
    (["--store", "file:///tmp/q", "--listen", "192.0.2.2:8765"], {}, "needs a bearer token"),
    (["--store", "file:///tmp/q", "--advertise-url", "broker:8765"], {},
     "--advertise-url (or OSQUEUE_ADVERTISE_URL): wants an http:// or https:// URL"),
    (["--store", "file:///tmp/q", "--advertise-url", "http://ops:s3cr3t@broker:8765"], {},
     "--advertise-url (or OSQUEUE_ADVERTISE_URL): must not carry a user or password"),
])
def test_a_bad_value_is_one_line_and_exit_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], env: dict[str, str], named: str) -> None:
    monkeypatch.delenv("OSQ_UNSET_FOR_TEST", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "Traceback" not in err
    assert "s3cr3t" not in err


def test_the_token_never_shows(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OSQ_TOKEN_FOR_TEST", TOKEN)
    s = settings("--store", "file:///tmp/q", "--token-env", "OSQ_TOKEN_FOR_TEST")
    assert s.bearer() == TOKEN
    assert TOKEN not in repr(s) and TOKEN not in str(s) and TOKEN not in str(s.model_dump())
    monkeypatch.setenv("OSQUEUE_TOKEN", TOKEN)
    assert settings("--store", "file:///tmp/q").bearer() == TOKEN
    assert cli.main(["--store", "file:///tmp/q", "--lease-s", "-1"]) == 2
    assert TOKEN not in capsys.readouterr().err


def test_beyond_loopback_takes_a_token_or_the_insecure_flag(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for listen in ("127.0.0.1:0", "localhost:0", "[::1]:0", "127.3.4.5:0"):
        assert settings("--store", "file:///tmp/q", "--listen", listen).token is None
    s = settings("--store", "file:///tmp/q", "--listen", "0.0.0.0:0", "--insecure-no-token")
    assert (s.host, s.token, s.insecure_no_token) == ("0.0.0.0", None, True)
    monkeypatch.setenv("OSQUEUE_TOKEN", TOKEN)
    s = settings("--store", "file:///tmp/q", "--listen", "0.0.0.0:0",
                 "--advertise-url", "http://broker.internal:8765")
    assert (s.bearer(), s.advertise_url) == (TOKEN, "http://broker.internal:8765")


def test_an_empty_osqueue_token_is_refused_not_served_without_auth(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """OSQUEUE_TOKEN set but empty (a secret that did not
    resolve) gave SecretStr(''), whose bearer() is '' and the app then requires
    no token at all: the broker served every route unauthenticated while its
    operator had asked for a token. ``--token-env`` naming an empty variable is
    refused (exit 2); the variable itself must be too."""
    monkeypatch.setenv("OSQUEUE_TOKEN", "")
    with pytest.raises(ValidationError) as info:
        settings("--store", "file:///tmp/q")
    lines = problems(info.value)
    assert len(lines) == 1 and "OSQUEUE_TOKEN" in lines[0], lines


def test_a_token_named_by_token_env_still_wins_and_an_empty_one_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The variable ``--token-env`` names beats an empty OSQUEUE_TOKEN; and when
    the named variable is itself empty, the settings are refused rather than
    served without a token."""
    monkeypatch.setenv("OSQ_NAMED_TOKEN", "abc")
    monkeypatch.setenv("OSQUEUE_TOKEN", "")  # overridden by the named variable
    assert settings("--store", "file:///tmp/q", "--token-env", "OSQ_NAMED_TOKEN").bearer() == "abc"
    monkeypatch.setenv("OSQ_NAMED_TOKEN", "")
    with pytest.raises(ValidationError):
        settings("--store", "file:///tmp/q", "--token-env", "OSQ_NAMED_TOKEN")


def test_slow_client_bounds_come_from_flags_and_variables(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = settings("--store", "file:///tmp/q").broker_config()
    assert (config.header_timeout_s, config.body_timeout_s, config.max_connections) == (
        10.0, 30.0, 1000)
    monkeypatch.setenv("OSQUEUE_BODY_TIMEOUT_S", "7")
    config = settings("--store", "file:///tmp/q", "--header-timeout-s", "2.5",
                      "--max-connections", "50").broker_config()
    assert (config.header_timeout_s, config.body_timeout_s, config.max_connections) == (
        2.5, 7.0, 50)
    for flag, bad in (("--header-timeout-s", "0"), ("--body-timeout-s", "-1"),
                      ("--max-connections", "0")):
        assert cli.main(["--store", "file:///tmp/q", flag, bad]) == 2
        assert flag in capsys.readouterr().err


def test_segment_settings_come_from_flags_and_variables(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = settings("--store", "file:///tmp/q").broker_config()
    assert (config.segment_push_jobs, config.segment_grace_s, config.sweep_s) == (
        10_000, 600.0, 60.0)
    monkeypatch.setenv("OSQUEUE_SEGMENT_GRACE_S", "5")
    config = settings("--store", "file:///tmp/q", "--segment-push-jobs", "200",
                      "--sweep-s", "0.5").broker_config()
    assert (config.segment_push_jobs, config.segment_grace_s, config.sweep_s) == (
        200, 5.0, 0.5)
    assert settings("--store", "file:///tmp/q", "--segment-push-jobs", "0"
                    ).broker_config().segment_push_jobs == 0
    for flag, bad in (("--segment-push-jobs", "-1"), ("--segment-grace-s", "0"),
                      ("--sweep-s", "0"), ("--sweep-s", "soon")):
        assert cli.main(["--store", "file:///tmp/q", flag, bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and flag in err
