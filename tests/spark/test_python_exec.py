"""``register()`` gives a local classic session's Python workers this interpreter
when nobody chose one: the rule (pure), and a real session made by a script run
as a user runs it, without ``PYSPARK_PYTHON`` and with no venv on ``PATH``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from osqueue_spark.datasource.python_exec import chosen_python
from tests.support.spark_jvm import JAVA_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
ME = "/venv/bin/python"


@pytest.mark.parametrize(("kw", "chosen"), [
    ({}, ME),  # local, nothing chosen: this interpreter
    ({"master": "local-cluster[2,1,1024]"}, ME),
    ({"current": ME}, None),  # already this one
    ({"env_python": "/opt/py/bin/python"}, None),  # the user's choice stands
    ({"conf_python": "/opt/py/bin/python"}, None),
    ({"master": "spark://host:7077"}, None),  # executors elsewhere have their own Python
    ({"master": "yarn"}, None),
])
def test_the_workers_python_is_changed_only_for_local_sessions_nobody_configured(
        kw: dict[str, str], chosen: str | None) -> None:
    args = {"master": "local[2]", "current": "python3", "env_python": None,
            "conf_python": None, "executable": ME, **kw}
    assert chosen_python(**args) == chosen  # type: ignore[arg-type]


SCRIPT = """
import logging, sys, tempfile
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
from pyspark.sql import SparkSession
from osqueue_spark import register
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
print("before:", spark.sparkContext.pythonExec)
register(spark)
print("after:", spark.sparkContext.pythonExec)
store = "file://" + tempfile.mkdtemp()
rows = (spark.read.format("osqueue").option("store", store).option("queue", "q")
        .option("missingQueue", "empty").load().count())  # a task: a Python worker
print("rows:", rows)
"""


@pytest.mark.spark
def test_a_script_run_by_a_venvs_python_not_activated_gets_working_workers(
        tmp_path: Path) -> None:
    """It died with ``ModuleNotFoundError: No module named 'osqueue_spark'`` in the
    workers, which ran ``python3`` from PATH. (The checkout is put on PYTHONPATH,
    which the workers inherit, as an editable install's path would be: python3
    still lacks the package's dependencies.)"""
    in_a_venv = [e for e in os.environ.get("PATH", "").split(os.pathsep)
                 if e and (Path(e).parent / "pyvenv.cfg").exists()]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(e for e in os.environ.get("PATH", "").split(os.pathsep)
                                  if e not in in_a_venv)
    env["PYTHONPATH"] = str(ROOT)
    env["SPARK_SUBMIT_OPTS"] = JAVA_OPTIONS  # the driver JVM's (CPU: tests.support.spark_jvm)
    script = tmp_path / "script.py"
    script.write_text(SCRIPT, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert "before: python3" in lines
    assert f"after: {sys.executable}" in lines
    assert "rows: 0" in lines
    assert any(line.startswith("osqueue.spark: osqueue: this local Spark session's Python "
                               f"workers will run {sys.executable}") for line in lines), lines
