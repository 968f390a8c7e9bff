"""tools/wall_time.py: each worker's test phases recorded, and summed per worker with
the critical worker named."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tools import wall_time


def report(nodeid: str, when: str, start: float, duration: float) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, start=start, duration=duration,
                           outcome="passed")


def test_each_worker_records_its_phases_and_the_summary_names_the_critical_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(wall_time.ENV, str(tmp_path))
    for worker, phases in {"gw0": [("tests/a.py::t1", 100.0, 30.0),
                                   ("tests/b.py::t2", 130.0, 5.0)],
                           "gw1": [("tests/c.py::t3", 101.0, 60.0)]}.items():
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        for nodeid, start, duration in phases:
            wall_time.pytest_runtest_logreport(report(nodeid, "call", start, duration))
    # the controller relays every worker's report again (with its node): not recorded
    relayed = report("tests/c.py::t3", "call", 101.0, 60.0)
    relayed.node = object()
    wall_time.pytest_runtest_logreport(relayed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gw0.jsonl", "gw1.jsonl"]
    out = wall_time.summary(tmp_path).splitlines()
    assert out[0] == "gw0: 2 tests, busy 35.0 s, from 0.0 s to 35.0 s"
    assert out[1].split() == ["30.0", "s", "tests/a.py"]
    assert "gw1: 1 tests, busy 60.0 s, from 1.0 s to 61.0 s" in out
    assert out[-1] == "critical worker gw1: stops at 61.0 s; sum of all durations 95.0 s"


def test_without_the_variable_nothing_is_recorded(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(wall_time.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    wall_time.pytest_runtest_logreport(report("tests/a.py::t", "call", 1.0, 1.0))
    assert list(tmp_path.iterdir()) == []
    assert wall_time.summary(tmp_path) == f"no records under {tmp_path}"
