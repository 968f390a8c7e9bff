"""The README as a new user follows it: ``make wheel``, a fresh venv with the wheel
and its ``[spark]`` extra, then the Spark snippet and the five-minute example,
each run twice in one directory (the second runs find ``./queues`` from the
first) with the venv's Python by its path, the venv NOT activated.

Not activated means what a shell without ``source .venv/bin/activate`` has: no
``PYSPARK_PYTHON``, no ``VIRTUAL_ENV``, no ``PYTHONPATH`` (the checkout is not
importable: only the installed wheel is), and no venv's ``bin`` on ``PATH``, so
``python3`` there is an interpreter without osqueue_spark. Spark's Python
workers ran that one, and every task died with ``ModuleNotFoundError``.

The wheel is built by the Makefile's target from a copy of the files it
packages (the checkout gets no ``build/`` or ``dist/``). One venv serves the
module; it is deleted afterwards. It comes in two variants, with the same runs
and checks (tests/support/tiers.py):

- ``short`` (``make test``): the wheel installed without its dependencies, which
  are linked from this environment instead (tests/support/linked_deps.py: the
  closure of the wheel's requirements with ``[spark]``, no other distribution, so
  an import the wheel does not declare still fails), and pip, offline, finds
  ``wheel[spark]`` satisfied there;
- ``long`` (``make long``): pip installs ``wheel[spark]`` (about 1 GB: pyspark,
  pyarrow, pandas) from its cache when it can (the one `make` filled), without
  byte-compiling what it installs (``PIP_NO_COMPILE``: what the runs import is
  compiled as they import it), which changes no file the programs run. Measured on
  the 2-core machine: about 35 s to install on a quiet machine, minutes with
  ``make test``'s workers beside it.

Both: about 10 s for the wheel, 15-20 s per Spark run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.linked_deps import link_closure, wheel_requirements
from tests.support.readme import block_after
from tests.support.spark_jvm import JAVA_OPTIONS

# The fixture's install counts against pytest-timeout's 300 s too (about 2.5 min of it
# with four xdist workers busy beside it, then 2.5 min for the four runs): the one test
# here gets a budget that fits both.
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
#: What ``make wheel`` needs from the checkout.
PACKAGED = ("Makefile", "pyproject.toml", "README.md", "broker", "osqueue_spark")
#: Variables an activated venv, a test session or a Spark set-up may leave behind.
NOT_A_NEW_SHELL = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH",
                   "PYTHONHOME", "SPARK_HOME", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED",
                   "SPARK_API_MODE")

#: What the Spark snippet shows (``show()`` of the read's statuses, then of the
#: workers' results), the same on each run: 100 jobs pushed, 100 completed.
SPARK_TABLES = """\
+-------+-----+
| status|count|
+-------+-----+
|pending|  100|
+-------+-----+

+---------+-----+
|   status|count|
+---------+-----+
|completed|  100|
+---------+-----+

"""


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    return proc


def user_env(venv: Path) -> dict[str, str]:
    """The environment of a shell in which no venv is activated."""
    def in_a_venv(entry: str) -> bool:
        return bool(entry) and (Path(entry).parent / "pyvenv.cfg").exists()

    env = {k: v for k, v in os.environ.items() if k not in NOT_A_NEW_SHELL}
    env["PATH"] = os.pathsep.join(
        e for e in os.environ.get("PATH", "").split(os.pathsep)
        if e and not in_a_venv(e) and Path(e) != venv / "bin")
    return env


@pytest.fixture(scope="module", params=[
    pytest.param("linked", id="short"),
    pytest.param("installed", id="long", marks=pytest.mark.long)])
def fresh_python(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The Python of a new venv with the wheel ``make wheel`` built, ``[spark]``
    extra: its dependencies linked (``short``) or installed by pip (``long``)."""
    base = tmp_path_factory.mktemp("fresh")
    src = base / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGED:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    run(["make", "--no-print-directory", "wheel", f"PY={sys.executable}"], src)
    [wheel] = (src / "dist").glob("osqueue_spark-*-py3-none-any.whl")
    venv = base / "venv"
    run([sys.executable, "-m", "venv", str(venv)], base)
    # PIP_NO_COMPILE: no .pyc written for the ~3,000 modules of pandas, pyspark, numpy
    # and the rest at install (CPU the other workers want); Python compiles what the
    # runs import
    env = {**user_env(venv), "PIP_NO_COMPILE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    if request.param == "installed":
        run([*pip, "install", "--quiet", f"{wheel}[spark]"], base, env=env, timeout_s=1200)
    else:
        linked = link_closure(venv, wheel_requirements(wheel), {"spark"})
        assert {"pyspark", "pandas", "pyarrow", "boto3"} <= set(linked)
        run([*pip, "install", "--quiet", "--no-index", "--no-deps", str(wheel)], base,
            env=env)
        # offline, pip finds every requirement of wheel[spark] met by what is linked
        check = run([*pip, "install", "--no-index", "--dry-run", f"{wheel}[spark]"], base,
                    env=env)
        assert "Would install" not in check.stdout, check.stdout
        run([*pip, "check"], base, env=env)
    yield venv / "bin" / "python"
    shutil.rmtree(base, ignore_errors=True)


def test_the_spark_snippet_and_the_five_minute_example_run_as_printed_in_a_fresh_venv(
        fresh_python: Path, tmp_path: Path) -> None:
    spark_code = block_after("readme-spark-example", "python")
    quick_code = block_after("readme-example", "python")
    expected = block_after("readme-example-output", "text")
    (tmp_path / "spark_quickstart.py").write_text(spark_code, encoding="utf-8")
    (tmp_path / "quickstart.py").write_text(quick_code, encoding="utf-8")
    # The driver JVMs get the tests' JIT and GC options (the two Spark runs are most of
    # this test's CPU; tests.support.spark_jvm): options of the JVM only, not a
    # variable that says which Python or which packages a program gets.
    env = {**user_env(fresh_python.parent.parent), "SPARK_SUBMIT_OPTS": JAVA_OPTIONS}
    probe = run([str(fresh_python), "-c", "import osqueue_spark; print(osqueue_spark.__file__)"],
                tmp_path, env)
    assert str(ROOT) not in probe.stdout  # the wheel's copy, not the checkout
    for attempt in (1, 2):
        spark = run([str(fresh_python), "spark_quickstart.py"], tmp_path, env)
        assert spark.stdout == SPARK_TABLES, f"run {attempt} printed:\n{spark.stdout}"
        quick = run([str(fresh_python), "quickstart.py"], tmp_path, env)
        assert quick.stdout == expected, f"run {attempt} printed:\n{quick.stdout}"
    for queue in ("spark-docs", "docs"):
        assert (tmp_path / "queues" / queue / "queue.json").is_file()
