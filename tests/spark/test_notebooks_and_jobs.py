"""The notebooks run as plain Python in this test session's SparkSession; the jobs as CLIs."""

from __future__ import annotations

import ast
import runpy
from pathlib import Path
from typing import Any

import pytest

from broker.errors import Unauthorized
from broker.http.server import BrokerServer
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


def test_quickstart_notebook(any_spark: Any, monkeypatch: pytest.MonkeyPatch,
                             tmp_path: Path) -> None:
    out = run_notebook("quickstart.py", any_spark, monkeypatch, tmp_path, rows="300")
    assert out["QUICKSTART_RESULT"] == {"rows": 300, "completed": 5, "total": 295}


def test_worker_pool_notebook(any_spark: Any, monkeypatch: pytest.MonkeyPatch,
                              tmp_path: Path) -> None:
    out = run_notebook("worker_pool.py", any_spark, monkeypatch, tmp_path, jobs="600",
                       workers="2")
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


def test_jobs_producer_worker_pool_and_report(any_spark: Any, jobs_broker: BrokerServer,
                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The jobs end to end, under each kind of session. Under Connect they build
    their own session from ``--remote`` (the Connect builder hands back the
    test's client session, which is the one they then use)."""
    import importlib.util

    from osqueue_spark import session

    def load(name: str) -> Any:
        spec = importlib.util.spec_from_file_location(name, ROOT / "jobs" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    spark = any_spark
    store = f"file://{tmp_path}"
    base = ["--broker", jobs_broker.url, "--store", store, "--queue", "jobsq"]
    remote: list[str] = []
    monkeypatch.setattr(spark, "stop", lambda: None)  # the jobs stop their session: keep ours
    producer, workers, report = load("producer"), load("worker_pool"), load("archive_report")
    if session.is_connect(spark):
        remote = ["--remote", f"sc://{spark.client._builder.endpoint}"]
        assert session.local_session("t", remote=remote[1]) is spark
    else:
        for mod in (producer, workers, report):
            monkeypatch.setattr(mod, "local_session", lambda *a, **k: spark)
    assert producer.main([*base, *remote, "--rows", "2000", "--partitions", "4"]) == 0
    assert QueueClient(jobs_broker.url, "jobsq").stats()["counts"]["pending"] == 2000
    assert workers.main([*base, *remote, "--workers", "2", "--out", str(tmp_path / "res"),
                         "--idle-s", "1"]) == 0
    assert report.main(["--store", store, "--queue", "jobsq", *remote]) == 0
    out = capsys.readouterr().out
    assert "enqueued 2,000 rows" in out
    assert "completed jobs archived in queue jobsq" in out
    stats = QueueClient(jobs_broker.url, "jobsq").stats()
    # poison documents and transient failures may still be waiting out their backoff
    assert stats["completed_total"] + stats["total"] == 2000
    assert stats["completed_total"] >= 1970


#: What a Spark Connect session does not have: RDDs, the SparkContext and what
#: hangs off it (broadcast variables, accumulators, setLogLevel), the JVM handles.
CLASSIC_ONLY_ATTRS = {"rdd", "sparkContext", "_jvm", "_jsc", "_jdf", "_jsparkSession"}
#: Where one is used anyway, behind an ``if not is_connect(spark)`` check.
GUARDED = {("osqueue_spark/session.py", 'spark.sparkContext.setLogLevel("ERROR")')}
#: start_broker asks whether this process is a classic cluster driver: it looks for an
#: active SparkContext (None in a Connect client) and never creates one.
LOOKS_ONLY = {("osqueue_spark/embedded.py", "from pyspark import SparkContext"),
              ("osqueue_spark/embedded.py", "sc = SparkContext._active_spark_context")}
#: register() sets a local classic session's workers' Python, after returning for a
#: Connect session (whose server picks its workers).
CLASSIC_BRANCH = {("osqueue_spark/datasource/python_exec.py", "sc = spark.sparkContext")}


def is_classic_only(node: ast.AST) -> bool:
    """Uses a classic-only API: one of those attributes, the SparkContext class
    (imported or named), an ``isinstance`` check against ``SparkSession`` (a
    Connect session is not an instance of the classic class)."""
    return ((isinstance(node, ast.Attribute) and node.attr in CLASSIC_ONLY_ATTRS)
            or (isinstance(node, ast.Name) and node.id == "SparkContext")
            or (isinstance(node, ast.ImportFrom)
                and any(a.name == "SparkContext" for a in node.names))
            or (isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance"
                and "SparkSession" in ast.unparse(node)))


def test_the_package_jobs_and_notebooks_use_no_classic_only_api() -> None:
    found = set()
    for folder in ("osqueue_spark", "jobs", "notebooks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            lines = text.splitlines()
            for node in filter(is_classic_only, ast.walk(ast.parse(text))):
                line = lines[node.lineno - 1].strip()  # type: ignore[attr-defined]
                found.add((str(path.relative_to(ROOT)), line))
                if (str(path.relative_to(ROOT)), line) in GUARDED:
                    assert lines[node.lineno - 2].strip() == (  # type: ignore[attr-defined]
                        "if not is_connect(spark):  # SPARK_API_MODE=connect makes the builder "
                        "give a Connect one")
    assert found == GUARDED | LOOKS_ONLY | CLASSIC_BRANCH
    probe = "df.rdd.count()\nisinstance(s, SparkSession)\nfrom pyspark import SparkContext\n"
    assert sum(map(is_classic_only, ast.walk(ast.parse(probe)))) == 3
