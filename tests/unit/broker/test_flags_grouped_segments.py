"""The grouped_segments flag (broker.flags, broker.cli): on by default;
--no-grouped-segments or OSQUEUE_GROUPED_SEGMENTS=false turns it off, and a
flag beats its variable."""

from __future__ import annotations

import os

import pytest

from broker import cli
from broker.flags import BrokerFlags


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OSQUEUE_"):
            monkeypatch.delenv(name)


def grouped(*argv: str) -> bool:
    flags = BrokerFlags.load(vars(cli.build_parser().parse_args(["--store", "file:///tmp/q",
                                                                  *argv])))
    return flags.broker_config().grouped_segments


def test_grouped_segments_are_on_by_default_and_turned_off_by_flag_or_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert grouped() is True
    assert grouped("--no-grouped-segments") is False
    assert grouped("--grouped-segments") is True
    monkeypatch.setenv("OSQUEUE_GROUPED_SEGMENTS", "false")
    assert grouped() is False
    assert grouped("--grouped-segments") is True  # (a flag beats its variable)
    monkeypatch.setenv("OSQUEUE_GROUPED_SEGMENTS", "true")
    assert grouped("--no-grouped-segments") is False
