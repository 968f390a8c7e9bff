"""A user's process keeps its garbage-collector settings: an embedded broker, a client
and ``process()`` never pause the collector nor change its thresholds (only the
broker's own entry point tunes GC, see :mod:`broker.gcpause`). No Spark."""

from __future__ import annotations

import gc
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from osqueue_spark import QueueClient, start_broker
from osqueue_spark.workers import RESULT_COLUMNS, process

ROOT = Path(__file__).resolve().parents[3]
JOBS = 3000  # batches well above gcpause.SMALL_BATCH, which a tuned broker would pause for


@pytest.fixture()
def gc_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every call that changes the collector's settings, recorded (and still made);
    the settings are put back after the test."""
    calls: list[str] = []
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    for name in ("disable", "enable", "set_threshold", "freeze", "unfreeze"):
        real = getattr(gc, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(*args)

        monkeypatch.setattr(gc, name, spy)
    yield calls
    monkeypatch.undo()
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def settings() -> tuple[tuple[int, int, int], bool]:
    return gc.get_threshold(), gc.isenabled()


@pytest.mark.parametrize("custom", [False, True], ids=["default", "user-set"])
def test_an_embedded_broker_leaves_gc_as_it_found_it(tmp_path: Path, gc_calls: list[str],
                                                     custom: bool) -> None:
    if custom:  # whatever the user chose stays chosen, even a collector switched off
        gc.set_threshold(1234, 7, 3)
        gc.disable()
        gc_calls.clear()
    before = settings()
    with start_broker(f"file://{tmp_path}") as broker:
        assert settings() == before
        client = QueueClient(broker.url, "q")
        ids = client.push_many(({"n": i} for i in range(JOBS)), batch_size=JOBS)
        client.stage("w/c0", list(range(JOBS)))
        assert client.publish("w/", ["w/c0"], once="write:w")["published"] == JOBS
        assert settings() == before
        jobs = client.claim("w", max_jobs=2 * JOBS, lease_s=60)
        assert len(ids) == JOBS and len(jobs) == 2 * JOBS
        assert all(r.ok for r in client.heartbeat([j.token for j in jobs]))
        assert all(r.ok for r in client.complete_many([(j.token, j.id) for j in jobs[:JOBS]]))
        assert all(r.ok for r in client.fail_many([(j.token, "x", None) for j in jobs[JOBS:]]))
        assert len(client.jobs(limit=JOBS)) == JOBS
        assert settings() == before
    assert settings() == before
    assert gc_calls == []


def test_process_leaves_gc_as_it_found_it(tmp_path: Path, gc_calls: list[str]) -> None:
    """The function ``process()`` hands to ``mapInPandas``, called as Spark would call
    it in a task (here in this process, without Spark)."""
    before = settings()
    with start_broker(f"file://{tmp_path}") as broker:
        QueueClient(broker.url, "q").push_many(range(JOBS), batch_size=JOBS)
        run = process(lambda n: n * 2, broker=broker.url, queue="q", batch_size=1000,
                      idle_s=0, lease_s=60)
        frames = []
        for frame in run(iter([])):
            assert settings() == before  # while the task runs
            frames.append(frame)
    assert settings() == before and gc_calls == []
    assert sum(len(f) for f in frames) == JOBS
    assert list(frames[0].columns) == RESULT_COLUMNS
    assert set(frames[0]["status"]) == {"completed"}


def test_importing_the_package_loads_no_gc_tuning() -> None:
    """Nothing that can change GC settings is even imported with the client side."""
    code = textwrap.dedent("""
        import sys
        import osqueue_spark
        from osqueue_spark import cli, client, heartbeat, sink, transport, workers
        from osqueue_spark.datasource import options
        from osqueue_spark.datasource import rows
        print(sorted(m for m in sys.modules if m == "broker.gcpause" or m.startswith("uvicorn")))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    imports = re.compile(r"^\s*(from|import)\s+broker(\.gcpause\b|\s+import\s.*\bgcpause\b)",
                         re.MULTILINE)
    assert not [p.name for p in (ROOT / "osqueue_spark").glob("*.py")
                if imports.search(p.read_text())]


def test_an_embedded_broker_tunes_gc_only_when_asked() -> None:
    """``start_broker(tune_gc=True)``: the owner of a driver that exists to feed the
    queue opts in to the broker's own GC tuning (for its whole process)."""
    code = textwrap.dedent("""
        import gc, sys, tempfile
        from osqueue_spark import start_broker
        before = gc.get_threshold()[0]
        with tempfile.TemporaryDirectory() as d:
            with start_broker("file://" + d) as broker:
                plain = gc.get_threshold()[0]
            with start_broker("file://" + d, tune_gc=True) as broker:
                tuned = gc.get_threshold()[0]
        print(before, plain, tuned)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    before, plain, tuned = map(int, out.stdout.split())
    assert plain == before and tuned >= max(before, 50_000)
