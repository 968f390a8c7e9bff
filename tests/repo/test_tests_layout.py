"""The tests' layout (docs/development.md, "Tests in tiers"): the unit tier mirrors the
package tree, and stays pure.

* Mirror: ``tests/unit/<package path>/test_<module>.py`` pins ``<package path>/<module>.py``
  (or the sub-package ``<module>/``); ``test_<module>_<aspect>.py`` pins one aspect of it,
  in a file of its own. A test file named after a module that does not exist (one that
  was renamed, merged or never was) fails here, naming the file.
* Pure: a unit test starts no server, subprocess, SparkSession or browser, so the tier
  runs in ``make check`` in seconds. Such tests belong in ``tests/integration``,
  ``tests/spark``, ``tests/browser`` or ``tests/e2e``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"

#: Imports that start a server, a process, a JVM or a browser, or open real sockets.
IMPURE_IMPORTS = ("subprocess", "socket", "multiprocessing", "pyspark", "playwright",
                  "broker.http.server", "tests.support.broker_process.BrokerProcess",
                  "tests.support.motoserver", "tests.support.gcsserver",
                  "tests.support.azuriteserver", "tests.support.connectserver",
                  "tests.support.faultproxy", "tests.support.sockets",
                  "tests.support.broker_relay")
#: Fixtures of tests/conftest.py that do the same.
IMPURE_FIXTURES = frozenset({"spark", "spark_connect", "any_spark", "moto_server", "s3_bucket",
                             "s3_url", "gcs_server", "gcs_url", "azurite_server",
                             "azure_container", "azure_url", "chromium", "ui_page"})


def modules_of(package: Path) -> set[str]:
    """The names a test file in the package's mirror may be named after: its modules
    and its sub-packages."""
    names = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    return names


def misnamed(unit: Path, root: Path) -> list[str]:
    """Test files under ``unit`` that name no module of the package they mirror."""
    wrong = []
    for path in sorted(unit.rglob("test_*.py")):
        package = root / path.parent.relative_to(unit)
        name = path.stem.removeprefix("test_")
        modules = modules_of(package) if package.is_dir() else set()
        if not any(name == m or name.startswith(f"{m}_") for m in modules):
            wrong.append(path.relative_to(root).as_posix())
    return wrong


def impure(path: Path) -> list[str]:
    """What in a test file starts a server, a process, Spark or a browser."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [f"fixture {a.arg}" for a in node.args.args if a.arg in IMPURE_FIXTURES]
            continue
        else:
            continue
        found += [n for n in names if any(n == i or n.startswith(f"{i}.") for i in IMPURE_IMPORTS)]
        found += [n for n in names if n.endswith(".start_broker")]
    return found


def test_every_unit_test_file_names_a_module_of_the_package_it_mirrors() -> None:
    assert list(UNIT.rglob("test_*.py")), "no unit tests found: has tests/unit moved?"
    assert misnamed(UNIT, ROOT) == []


def test_the_mirror_rule_refuses_a_file_named_after_no_module(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for name in ("pkg/__init__.py", "pkg/sub/__init__.py", "pkg/codec.py", "pkg/sub/store.py"):
        (tmp_path / name).write_text("")
    unit = tmp_path / "tests" / "unit"
    (unit / "pkg" / "sub").mkdir(parents=True)
    (unit / "gone").mkdir()
    for name in ("pkg/test_codec.py", "pkg/test_codec_golden.py", "pkg/test_sub.py",
                 "pkg/sub/test_store.py", "pkg/test_api.py", "pkg/test_codecs.py",
                 "pkg/sub/test_codec.py", "gone/test_x.py"):
        (unit / name).write_text("")
    assert misnamed(unit, tmp_path) == [
        "tests/unit/gone/test_x.py", "tests/unit/pkg/sub/test_codec.py",
        "tests/unit/pkg/test_api.py", "tests/unit/pkg/test_codecs.py"]


def test_no_unit_test_starts_a_server_a_process_spark_or_a_browser() -> None:
    found = {path.relative_to(ROOT).as_posix(): impure(path)
             for path in sorted(UNIT.rglob("test_*.py"))}
    assert {path: what for path, what in found.items() if what} == {}


def test_the_purity_check_sees_imports_and_fixtures(tmp_path: Path) -> None:
    path = tmp_path / "test_x.py"
    path.write_text("import subprocess\nfrom osqueue_spark import start_broker\n"
                    "from tests.support.broker_process import BrokerProcess\n"
                    "import json\n\ndef test_a(tmp_path, s3_url):\n    pass\n")
    assert impure(path) == ["subprocess", "osqueue_spark.start_broker",
                            "tests.support.broker_process.BrokerProcess", "fixture s3_url"]




def imported_test_modules(path: Path) -> list[str]:
    """The test modules (``tests.<tier>...test_*``) a file imports from."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = [a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for a in node.names]
    names += [node.module for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module]
    return [n for n in names
            if n.startswith("tests.") and n.rpartition(".")[2].startswith("test_")]


def test_no_test_module_imports_another() -> None:
    """Shared helpers and fixtures live in tests/support: a test module imported by
    another runs its module-level set-up twice and ties two files' fates."""
    found = {path.relative_to(ROOT).as_posix(): imported_test_modules(path)
             for path in sorted((ROOT / "tests").rglob("test_*.py"))}
    found = {path: mods for path, mods in found.items() if mods}
    assert found == {}


def test_the_import_check_sees_test_modules_only(tmp_path: Path) -> None:
    path = tmp_path / "test_x.py"
    path.write_text("import tests.unit.test_a\nfrom tests.e2e.test_readme import block_after\n"
                    "from tests.support.readme import block_after\nimport json\n")
    assert imported_test_modules(path) == ["tests.unit.test_a", "tests.e2e.test_readme"]
