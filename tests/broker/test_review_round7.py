"""Seventh review (issue 10, the refactor): regressions found against 7f25163."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from broker import cli
from broker.config import BrokerSettings, problems


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OSQUEUE_"):
            monkeypatch.delenv(name)


def _settings(*argv: str) -> BrokerSettings:
    return BrokerSettings.load(vars(cli.build_parser().parse_args(list(argv))))


def test_an_empty_osqueue_token_is_refused_not_served_without_auth(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """OSQUEUE_TOKEN (new in issue 10) set but empty (a secret that did not
    resolve) gave SecretStr(''), whose bearer() is '' and the app then requires
    no token at all: the broker served every route unauthenticated while its
    operator had asked for a token. ``--token-env`` naming an empty variable is
    refused (exit 2); the variable itself must be too."""
    monkeypatch.setenv("OSQUEUE_TOKEN", "")
    with pytest.raises(ValidationError) as info:
        _settings("--store", "file:///tmp/q")
    lines = problems(info.value)
    assert len(lines) == 1 and "OSQUEUE_TOKEN" in lines[0], lines


def test_a_token_named_by_token_env_still_wins_and_an_empty_one_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSQ_R7_TOKEN", "abc")
    monkeypatch.setenv("OSQUEUE_TOKEN", "")  # overridden by the named variable
    assert _settings("--store", "file:///tmp/q", "--token-env", "OSQ_R7_TOKEN").bearer() == "abc"
    monkeypatch.setenv("OSQ_R7_TOKEN", "")
    with pytest.raises(ValidationError):
        _settings("--store", "file:///tmp/q", "--token-env", "OSQ_R7_TOKEN")
