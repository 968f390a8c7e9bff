"""The held_in_records flag (broker.flags, broker.cli): on by default;
--no-held-in-records or OSQUEUE_HELD_IN_RECORDS=false turns it off, and a
flag beats its variable."""

from __future__ import annotations

import os

import pytest

from broker import cli
from broker.flags import BrokerFlags
from broker.service.config import BrokerConfig


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OSQUEUE_"):
            monkeypatch.delenv(name)


def held(*argv: str) -> bool:
    flags = BrokerFlags.load(vars(cli.build_parser().parse_args(["--store", "file:///tmp/q",
                                                                  *argv])))
    return flags.broker_config().held_in_records


def test_held_in_records_is_on_by_default_and_turned_off_by_flag_or_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert BrokerConfig().held_in_records is True
    assert held() is True
    assert held("--no-held-in-records") is False
    assert held("--held-in-records") is True
    monkeypatch.setenv("OSQUEUE_HELD_IN_RECORDS", "false")
    assert held() is False
    assert held("--held-in-records") is True  # (a flag beats its variable)
    monkeypatch.setenv("OSQUEUE_HELD_IN_RECORDS", "0")
    assert held() is False
    monkeypatch.setenv("OSQUEUE_HELD_IN_RECORDS", "true")
    assert held("--no-held-in-records") is False
