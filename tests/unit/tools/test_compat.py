"""tools/compat.py's own logic (no venvs, no Spark): which tests it runs, how it reads
pytest's report, which releases it picks, and the table it writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import compat

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.spark.test_spark" name="test_a[classic]"/>
<testcase classname="tests.spark.test_spark" name="test_a[connect]">
  <failure message="boom">trace</failure></testcase>
<testcase classname="tests.spark.test_stream" name="test_b"><skipped/></testcase>
<testcase classname="tests.spark.test_stream" name="test_c"><error/></testcase>
</testsuite></testsuites>"""


def test_parse_junit_counts_and_names_failures(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    counts, failing = compat.parse_junit(path)
    assert counts == {"passed": 1, "failed": 1, "skipped": 1, "errors": 1}
    assert failing == ["test_spark::test_a[connect]", "test_stream::test_c"]


def test_spark_test_files_finds_spark_fixtures_outside_the_spark_folder(tmp_path: Path) -> None:
    (tmp_path / "tests" / "spark").mkdir(parents=True)
    (tmp_path / "tests" / "broker").mkdir()
    (tmp_path / "tests" / "broker" / "test_plain.py").write_text("def test_x(tmp_path): ...\n")
    fixture = "any" + "_spark"  # spelled apart so that this file is not picked itself
    (tmp_path / "tests" / "broker" / "test_uses.py").write_text(
        f"def test_y(tmp_path, {fixture}): ...\n")
    (tmp_path / "tests" / "test_imports.py").write_text("from py" + "spark.sql import Row\n")
    assert compat.spark_test_files(tmp_path) == [
        "tests/spark", "tests/broker/test_uses.py", "tests/test_imports.py"]
    chosen = compat.spark_test_files()
    assert chosen[0] == "tests/spark" and "tests/unit/tools/test_compat.py" not in chosen


def test_resolve_picks_the_latest_patch_or_an_exact_release() -> None:
    assert [compat.resolve(v) for v in ("4.0", "4.3", "4.1.2")] == ["4.0.5", "4.3.0", "4.1.2"]
    with pytest.raises(SystemExit, match=r"exact release like 4\.0\.5"):
        compat.resolve("4")


def test_render_writes_one_row_per_version_with_failures() -> None:
    rows = [compat.Row("4.0.5", "failed", passed=3, failed=1, wall_s=12.3,
                       failing=["test_spark::t"], packages={"pandas": "2.3.3"}, commit="abc"),
            compat.Row("4.3.0", "ok", passed=4, wall_s=10)]
    table = compat.render(rows, {"when": "now", "commit": "abc", "python": "3.11",
                                 "tests": ["tests/spark"]})
    lines = [ln for ln in table.splitlines() if ln.startswith("| 4.")]
    assert lines[0].startswith("| 4.0.5 | failed | 3 | 1 | 0 | 0 | 12 | 2.3.3 |")
    assert "`test_spark::t`" in lines[0] and lines[1].startswith("| 4.3.0 | ok | 4 |")
