"""Run the Spark tests under each supported PySpark minor, one fresh venv each.

    python tools/compat.py                      # 4.0, 4.1, 4.2 and 4.3 (latest patch of each)
    python tools/compat.py --versions 4.0,4.3   # a subset; other rows of the table are kept
    python tools/compat.py --versions 4.0.3     # an exact release
    python tools/compat.py --fresh              # rebuild the venvs first
    make compat VERSIONS=4.0                    # the same through make

For every version it makes a virtual environment under ``.compat/pyspark-X.Y.Z``
(git-ignored; kept between runs unless ``--fresh``), installs this project into
it with ``pyspark[connect]==X.Y.Z`` pinned (``pip install -e '.[spark,dev]'``,
pandas < 3 from the ``spark`` extra), and runs every Spark test in it: all of
``tests/spark`` plus any other test file that takes a SparkSession
fixture (``spark``, ``spark_connect``, ``any_spark``) or imports pyspark. So
classic and Spark Connect sessions are both exercised, as in ``make test``.

Network: only the package registries pip is configured with, and pip's cache is
reused (a PySpark sdist is ~430 MB; it is downloaded once per release). The
tests themselves start their servers on 127.0.0.1.

Results: a table (version, passed / failed / skipped / errors, wall time in
seconds, the failing tests) printed and written to ``bench/results/compat.md``
and ``compat.json``; rows of versions not run this time are kept from the last
run. Per-version logs stay in the venv folder (``install.log``, ``pytest.log``,
``junit.xml``). Exit status 0 only if every version ran with no failure.

``make test`` does not call this: it tests the one PySpark in ``.venv``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# The latest patch of each minor on PyPI when this was written
# (`pip index versions pyspark`); pass an exact X.Y.Z to try another.
LATEST_PATCH = {"4.0": "4.0.5", "4.1": "4.1.4", "4.2": "4.2.1", "4.3": "4.3.0"}
SPARK_FIXTURE = re.compile(
    r"def \w+\([^)]*\b(spark|spark_connect|any_spark)\b|^\s*(from|import) pyspark\b",
    re.MULTILINE,
)


@dataclass
class Row:
    """One version's outcome. ``status``: ``ok``, ``failed``, ``install failed``
    or ``no result`` (pytest died before writing its report)."""

    version: str
    status: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    wall_s: float = 0.0
    failing: list[str] = field(default_factory=list)
    packages: dict[str, str] = field(default_factory=dict)
    commit: str = ""
    when: str = ""


def resolve(spec: str) -> str:
    """``4.0`` -> the pinned latest patch; ``4.0.3`` stays as given."""
    spec = spec.strip()
    if spec in LATEST_PATCH:
        return LATEST_PATCH[spec]
    if re.fullmatch(r"\d+\.\d+\.\d+", spec):
        return spec
    raise SystemExit(f"--versions: {spec!r} is neither a minor in {sorted(LATEST_PATCH)} "
                     "nor an exact release like 4.0.5")


def spark_test_files(root: Path = ROOT) -> list[str]:
    """``tests/spark`` and every other test file that uses a SparkSession."""
    chosen = ["tests/spark"]
    for path in sorted((root / "tests").rglob("test_*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("tests/spark/"):
            continue
        if SPARK_FIXTURE.search(path.read_text(encoding="utf-8", errors="replace")):
            chosen.append(rel)
    return chosen


def run_logged(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` in the project root, appending its output to ``log``."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        return subprocess.call(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)


def ensure_venv(version: str, base: Path, python: str, fresh: bool) -> tuple[Path, str | None]:
    """The venv for ``version`` (made and installed if needed); an error text if it failed."""
    venv = base / f"pyspark-{version}"
    stamp = venv / ".installed"
    requirement = f"pyspark[connect]=={version}"
    if fresh and venv.exists():
        shutil.rmtree(venv)
    if stamp.exists() and stamp.read_text().strip() == requirement:
        return venv, None
    if venv.exists():
        shutil.rmtree(venv)  # a half-made venv from an interrupted run
    venv.mkdir(parents=True)
    log = venv / "install.log"
    py = str(venv / "bin" / "python")
    steps = [
        [python, "-m", "venv", str(venv)],
        [py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
        [py, "-m", "pip", "install", "--quiet", "-e", ".[spark,dev]", requirement],
    ]
    for cmd in steps:
        if run_logged(cmd, log) != 0:
            return venv, f"`{' '.join(cmd[1:])}` failed; see {log.relative_to(ROOT)}"
    stamp.write_text(requirement + "\n")
    return venv, None


def installed_versions(venv: Path) -> dict[str, str]:
    """Versions of the packages that matter to Spark, as installed in ``venv``."""
    code = ("import importlib.metadata as m, json, sys\n"
            "names = ['pyspark', 'pandas', 'pyarrow', 'grpcio', 'numpy']\n"
            "json.dump({n: m.version(n) for n in names}, sys.stdout)")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                         text=True, cwd=ROOT)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def parse_junit(path: Path) -> tuple[dict[str, int], list[str]]:
    """Counts and failing test ids (``file::test[param]``) from pytest's JUnit XML."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failing: list[str] = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name', '')}"
        if case.find("failure") is not None:
            counts["failed"] += 1
            failing.append(name)
        elif case.find("error") is not None:
            counts["errors"] += 1
            failing.append(name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts, failing


def run_version(version: str, base: Path, python: str, fresh: bool,
                tests: list[str], pytest_args: list[str]) -> Row:
    """Install (if needed) and test one PySpark release; never raises for a test failure."""
    started = time.perf_counter()
    print(f"== pyspark {version}: preparing {base.name}/pyspark-{version}", flush=True)
    venv, error = ensure_venv(version, base, python, fresh)
    if error:
        print(f"   {error}", flush=True)
        return Row(version, "install failed", wall_s=round(time.perf_counter() - started, 1),
                   failing=[error])
    junit = venv / "junit.xml"
    junit.unlink(missing_ok=True)
    log = venv / "pytest.log"
    log.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("VIRTUAL_ENV", None)
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--junitxml={junit}", *pytest_args, *tests]
    print(f"   running {len(tests)} test paths (log: {log.relative_to(ROOT)})", flush=True)
    t0 = time.perf_counter()
    rc = run_logged(cmd, log, env)
    wall = round(time.perf_counter() - t0, 1)
    packages = installed_versions(venv)
    if not junit.exists():
        return Row(version, "no result", wall_s=wall, packages=packages,
                   failing=[f"pytest exited {rc} without a report; see {log.relative_to(ROOT)}"])
    counts, failing = parse_junit(junit)
    status = "ok" if rc == 0 and not failing else "failed"
    return Row(version, status, passed=counts["passed"], failed=counts["failed"],
               skipped=counts["skipped"], errors=counts["errors"], wall_s=wall, failing=failing,
               packages=packages)


def load_rows(path: Path) -> dict[str, Row]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {r["version"]: Row(**r) for r in data.get("rows", [])}


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def render(rows: list[Row], meta: dict[str, Any]) -> str:
    """The Markdown table (the README copies it)."""
    lines = [
        "# PySpark compatibility",
        "",
        f"`python tools/compat.py`, last run {meta['when']} at commit `{meta['commit']}`, "
        f"Python {meta['python']}; each row is its own venv running "
        f"{', '.join(f'`{t}`' for t in meta['tests'])} (classic and Spark Connect sessions).",
        "",
        "| PySpark | result | passed | failed | skipped | errors | wall (s) | pandas | pyarrow "
        "| commit | failing tests |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---|---|",
    ]
    for r in rows:
        failing = "<br>".join(f"`{f}`" for f in r.failing) or "-"
        lines.append(f"| {r.version} | {r.status} | {r.passed} | {r.failed} | {r.skipped} | "
                     f"{r.errors} | {r.wall_s:.0f} | {r.packages.get('pandas', '?')} | "
                     f"{r.packages.get('pyarrow', '?')} | `{r.commit}` | {failing} |")
    return "\n".join(lines) + "\n"


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=ROOT)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return (out.stdout.strip() or "unknown") + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--versions", default=",".join(LATEST_PATCH),
                   help="comma-separated minors (4.0) or exact releases (4.0.5)")
    p.add_argument("--fresh", action="store_true", help="remove and rebuild the venvs first")
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter the venvs are made from (3.11+)")
    p.add_argument("--dir", default=str(ROOT / ".compat"), help="where the venvs live")
    p.add_argument("--results", default=str(RESULTS / "compat"),
                   help="results path without suffix (.md and .json are written)")
    p.add_argument("pytest_args", nargs="*",
                   help="extra pytest arguments after --, e.g. -- -x -k stream")
    args = p.parse_args(argv)
    versions = [resolve(v) for v in args.versions.split(",") if v.strip()]
    base = Path(args.dir).resolve()
    tests = spark_test_files()
    results = Path(args.results)
    rows = load_rows(results.with_suffix(".json"))
    ran: list[Row] = []
    commit = git_commit()
    for version in versions:
        row = run_version(version, base, args.python, args.fresh, tests, args.pytest_args)
        row.commit, row.when = commit, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(f"   {row.status}: {row.passed} passed, {row.failed} failed, {row.skipped} skipped, "
              f"{row.errors} errors in {row.wall_s:.0f}s", flush=True)
        rows[version] = row
        ran.append(row)
    py = subprocess.run([args.python, "-c", "import platform; print(platform.python_version())"],
                        capture_output=True, text=True).stdout.strip()
    meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
            "python": py, "tests": tests}
    ordered = [rows[v] for v in sorted(rows, key=version_key)]
    results.parent.mkdir(parents=True, exist_ok=True)
    results.with_suffix(".json").write_text(
        json.dumps({**meta, "rows": [asdict(r) for r in ordered]}, indent=2) + "\n")
    table = render(ordered, meta)
    results.with_suffix(".md").write_text(table)
    print()
    print(table)
    return 0 if all(r.status == "ok" for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
