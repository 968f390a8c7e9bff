"""The broker's on-by-default switches (broker.flags, broker.cli): grouped_segments,
held_in_records and spill_pending. Each is on by default in BrokerConfig and on the
command line; ``--no-<name>`` or ``OSQUEUE_<NAME>=false`` (or ``0``) turns it off, and
a flag beats its variable. Spilling dead jobs is on by default too, past
``spill_jobs`` of them; ``--spill-jobs 0`` or ``OSQUEUE_SPILL_JOBS=0`` turns it off."""

from __future__ import annotations

import os

import pytest

from broker import cli
from broker.flags import BrokerFlags
from broker.service.config import BrokerConfig

SWITCHES = ["grouped_segments", "held_in_records", "spill_pending"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OSQUEUE_"):
            monkeypatch.delenv(name)


def config(*argv: str) -> BrokerConfig:
    return BrokerFlags.load(vars(cli.build_parser().parse_args(["--store", "file:///tmp/q",
                                                                 *argv]))).broker_config()


def setting(name: str, *argv: str) -> bool:
    value = getattr(config(*argv), name)
    assert isinstance(value, bool)
    return value


@pytest.mark.parametrize("name", SWITCHES)
def test_a_switch_is_on_by_default_and_turned_off_by_flag_or_variable(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    flag, variable = "--" + name.replace("_", "-"), "OSQUEUE_" + name.upper()
    no_flag = "--no-" + flag[2:]
    assert getattr(BrokerConfig(), name) is True
    assert setting(name) is True
    assert setting(name, no_flag) is False
    assert setting(name, flag) is True
    monkeypatch.setenv(variable, "false")
    assert setting(name) is False
    assert setting(name, flag) is True  # (a flag beats its variable)
    monkeypatch.setenv(variable, "0")
    assert setting(name) is False
    monkeypatch.setenv(variable, "true")
    assert setting(name, no_flag) is False


def test_spilling_is_on_by_default_and_turned_off_by_spill_jobs_0(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert BrokerConfig().spill_jobs == config().spill_jobs == 1024
    assert config().spill_bytes == BrokerConfig().spill_bytes == 256 * 1024
    assert config("--spill-jobs", "0").spill_jobs == 0
    assert config("--spill-jobs", "64", "--spill-bytes", "4096").spill_bytes == 4096
    monkeypatch.setenv("OSQUEUE_SPILL_JOBS", "0")
    assert config().spill_jobs == 0
    assert config("--spill-jobs", "10").spill_jobs == 10  # (a flag beats its variable)
