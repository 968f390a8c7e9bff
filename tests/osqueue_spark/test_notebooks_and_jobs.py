"""The notebooks run as plain Python in this test session's SparkSession; the jobs as CLIs."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from broker.errors import Unauthorized
from broker.server import BrokerServer
from osqueue_spark import QueueClient, start_broker

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def run_notebook(name: str, spark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                 **env: str) -> dict[str, Any]:
    monkeypatch.setenv("OSQUEUE_STORE", f"file://{tmp_path}")
    monkeypatch.setenv("OSQUEUE_BROKER", "")
    for key, value in env.items():
        monkeypatch.setenv(f"OSQUEUE_{key.upper()}", value)
    text = (ROOT / "notebooks" / name).read_text()
    assert text.startswith("# Databricks notebook source") and "# COMMAND ----------" in text
    # run as __main__, like a notebook cell: cloudpickle then ships its functions by value
    return runpy.run_path(str(ROOT / "notebooks" / name), init_globals={"spark": spark},
                          run_name="__main__")


def test_quickstart_notebook(spark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = run_notebook("quickstart.py", spark, monkeypatch, tmp_path, rows="300")
    assert out["QUICKSTART_RESULT"] == {"rows": 300, "completed": 5, "total": 295}


def test_worker_pool_notebook(spark: Any, monkeypatch: pytest.MonkeyPatch,
                              tmp_path: Path) -> None:
    out = run_notebook("worker_pool.py", spark, monkeypatch, tmp_path, jobs="600", workers="2")
    res = out["WORKER_POOL_RESULT"]
    assert res["stats"]["completed_total"] == 598  # n % 500 == 7: two bad payloads
    assert res["stats"]["counts"]["dead"] == 2 and res["summary"]["dead"] == 2


def test_operations_notebook(spark: Any, monkeypatch: pytest.MonkeyPatch,
                             tmp_path: Path) -> None:
    out = run_notebook("operations.py", spark, monkeypatch, tmp_path)
    res = out["OPERATIONS_RESULT"]
    assert res["dead_before"] == 5 and res["redriven"] == 5
    assert res["counts"]["dead"] == 0 and res["counts"]["pending"] == 20


def test_quickstart_on_databricks_with_a_standalone_broker(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As on serverless: widgets and the token come from ``dbutils`` (a fake: Databricks
    cannot be had), the broker is a separate one that enforces the token."""
    import types

    token = "nb-secret-5e4d3c2b1a"
    with start_broker(f"file://{tmp_path}", token=token) as broker:
        values = {"store": f"file://{tmp_path}", "broker": broker.url, "queue": "dbx",
                  "rows": "40", "secret_scope": "osqueue", "token_key": "broker-token"}
        asked: list[tuple[str, str]] = []

        def get_secret(scope: str, key: str) -> str:
            asked.append((scope, key))
            return token

        dbutils = types.SimpleNamespace(
            widgets=types.SimpleNamespace(text=lambda name, default: None, get=values.__getitem__),
            secrets=types.SimpleNamespace(get=get_secret))
        out = runpy.run_path(str(ROOT / "notebooks" / "quickstart.py"),
                             init_globals={"spark": spark, "dbutils": dbutils},
                             run_name="__main__")
        assert out["QUICKSTART_RESULT"] == {"rows": 40, "completed": 5, "total": 35}
        assert asked == [("osqueue", "broker-token")] and out["embedded"] is None
        with pytest.raises(Unauthorized):
            QueueClient(broker.url, "dbx").stats()  # the notebook could only have used the token
    assert token not in capsys.readouterr().out


@pytest.fixture()
def jobs_broker(tmp_path: Path) -> Any:
    with start_broker(f"file://{tmp_path}") as b:
        yield b


def test_jobs_producer_worker_pool_and_report(spark: Any, jobs_broker: BrokerServer,
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    def load(name: str) -> Any:
        spec = importlib.util.spec_from_file_location(name, ROOT / "jobs" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    import osqueue_spark.pipelines as pipelines

    store = f"file://{tmp_path}"
    base = ["--broker", jobs_broker.url, "--store", store, "--queue", "jobsq"]
    stop = spark.stop
    try:
        spark.stop = lambda: None  # the jobs stop their session; keep the test session alive
        pipelines_local = pipelines.local_session
        pipelines.local_session = lambda *a, **k: spark  # type: ignore[assignment]
        producer, workers, report = load("producer"), load("worker_pool"), load("archive_report")
        producer.local_session = workers.local_session = report.local_session = (
            lambda *a, **k: spark)
        assert producer.main([*base, "--rows", "2000", "--partitions", "4"]) == 0
        assert QueueClient(jobs_broker.url, "jobsq").stats()["counts"]["pending"] == 2000
        assert workers.main([*base, "--workers", "2", "--out", str(tmp_path / "res"),
                             "--idle-s", "1"]) == 0
        assert report.main(["--store", store, "--queue", "jobsq"]) == 0
    finally:
        spark.stop = stop
        pipelines.local_session = pipelines_local  # type: ignore[assignment]
    out = capsys.readouterr().out
    assert "enqueued 2,000 rows" in out
    assert "completed jobs archived in queue jobsq" in out
    stats = QueueClient(jobs_broker.url, "jobsq").stats()
    # poison documents and transient failures may still be waiting out their backoff
    assert stats["completed_total"] + stats["total"] == 2000
    assert stats["completed_total"] >= 1970
