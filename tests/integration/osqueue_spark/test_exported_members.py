"""The package's public face (``osqueue_spark/__init__.py``): every error a user can
catch, ``__all__`` complete and sorted, the lazy pyspark names typed for a type
checker, ``py.typed`` shipped and ``__version__`` from the package metadata."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import broker
import osqueue_spark
from broker.errors import OsqueueError

ROOT = Path(__file__).resolve().parents[3]
INIT = ROOT / "osqueue_spark" / "__init__.py"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _all_error_classes() -> set[type[OsqueueError]]:
    """Every subclass of the root defined anywhere in broker/ or osqueue_spark/
    (each of their modules imported, so none is missed)."""
    for package in (broker, osqueue_spark):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not info.name.endswith(".__main__"):
                importlib.import_module(info.name)
    found: set[type[OsqueueError]] = set()
    todo = [OsqueueError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


def _project_imports() -> set[str]:
    """The names ``__init__.py`` imports from broker or osqueue_spark at its top
    level (its ``if TYPE_CHECKING:`` block included)."""
    tree = ast.parse(INIT.read_text())
    nodes = [*tree.body, *(n for s in tree.body if isinstance(s, ast.If) for n in s.body)]
    return {alias.asname or alias.name for node in nodes
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.split(".")[0] in ("broker", "osqueue_spark")
            for alias in node.names}


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_every_public_error_class_is_exported() -> None:
    public = {cls for cls in _all_error_classes() if not cls.__name__.startswith("_")}
    missing = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in public
                     if getattr(osqueue_spark, cls.__name__, None) is not cls)
    assert missing == []
    assert len({cls.__name__ for cls in public}) == len(public)  # no two share a name
    assert {c.__name__ for c in public} >= {"BrokerUnavailable", "NotTheBroker", "QueueFull",
                                           "InvalidArgument", "OptionError"}


def test_all_lists_exactly_what_the_package_imports_and_is_sorted() -> None:
    assert osqueue_spark.__all__ == sorted(osqueue_spark.__all__, key=_isort_key)
    assert len(set(osqueue_spark.__all__)) == len(osqueue_spark.__all__)
    assert set(osqueue_spark.__all__) == _project_imports()


@pytest.mark.parametrize("name", osqueue_spark.__all__)
def test_each_exported_name_imports(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from osqueue_spark import {name}", namespace)
    value = namespace[name]
    assert value is getattr(osqueue_spark, name)
    if isinstance(value, type) and issubclass(value, BaseException):
        assert issubclass(value, OsqueueError)  # one root to catch


def test_every_exported_error_descends_from_the_one_root() -> None:
    errors = [getattr(osqueue_spark, n) for n in osqueue_spark.__all__
              if isinstance(getattr(osqueue_spark, n), type)
              and issubclass(getattr(osqueue_spark, n), BaseException)]
    assert len(errors) == len({c for c in _all_error_classes() if not c.__name__.startswith("_")})
    assert all(issubclass(cls, OsqueueError) for cls in errors)
    assert all(isinstance(cls.code, str) and cls.code for cls in errors)


def test_star_import_gives_every_name() -> None:
    namespace: dict[str, object] = {}
    exec("from osqueue_spark import *", namespace)
    assert set(osqueue_spark.__all__) <= set(namespace)


def test_importing_the_package_loads_no_spark() -> None:
    """The errors (the data source's ``OptionError`` among them) import without
    pyspark: only the lazy names need it."""
    code = ("import sys, osqueue_spark; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'pandas', "
            "'pyarrow', 'py4j'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(), cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _version_with(patch: str) -> str:
    code = textwrap.dedent(f"""
        import importlib.metadata as m
        real = m.version
        def version(name):
            if name == "osqueue-spark":
                {patch}
            return real(name)
        m.version = version
        import osqueue_spark
        print(osqueue_spark.__version__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(), cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_version_comes_from_the_package_metadata() -> None:
    assert _version_with('return "7.8.9"') == "7.8.9"


def test_version_without_metadata_is_a_valid_local_version() -> None:
    version = _version_with("raise m.PackageNotFoundError(name)")
    assert version == "0+unknown"
    assert re.fullmatch(r"0\+[a-z]+", version)  # PEP 440: sorts before every release


def test_both_packages_ship_py_typed_and_the_license_is_spdx() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = project["tool"]["setuptools"]["package-data"]
    for package in ("broker", "osqueue_spark"):
        assert (ROOT / package / "py.typed").is_file()
        assert "py.typed" in data[package]
    assert project["project"]["license"] == "Apache-2.0"  # PEP 639: an SPDX expression
    setuptools = next(r for r in project["build-system"]["requires"] if r.startswith("setuptools"))
    minimum = re.fullmatch(r"setuptools>=(\d+)", setuptools)
    assert minimum is not None and int(minimum[1]) >= 77  # reads PEP 639


USER_SCRIPT = """\
from osqueue_spark import RESULT_SCHEMA, QueueFull, __version__, process, push_partition, register

reveal_type(process)
reveal_type(register)
reveal_type(push_partition)
reveal_type(RESULT_SCHEMA)
try:
    pass
except QueueFull as exc:
    reveal_type(exc)
reveal_type(__version__)
process(len, broker="http://127.0.0.1:8000")  # no queue: a type checker must say so
"""


@pytest.mark.slow
def test_mypy_strict_on_a_users_script_sees_the_types(tmp_path: Path) -> None:
    """mypy finds the package on the path as an installed one: it reads it only with
    ``py.typed``, and sees the lazy names' types only through their TYPE_CHECKING
    imports (``__getattr__`` alone makes them ``Any``)."""
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", str(tmp_path / "cache"), "user.py"],
        capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=280)
    revealed = re.findall(r'user\.py:\d+: note: Revealed type is "(.*)"', out.stdout)
    errors = re.findall(r"user\.py:(\d+): error: (.*)", out.stdout)
    assert len(revealed) == 6, out.stdout + out.stderr
    assert "Any" not in [t for t in revealed], out.stdout
    assert revealed[0].startswith("def (fn: def (Any) -> Any, *, broker: str, queue: str")
    assert revealed[1].startswith("def (spark:")
    assert revealed[3] in ("str", "builtins.str")  # mypy 2 drops "builtins."
    assert revealed[4] == "broker.errors.QueueFull"
    assert revealed[5] in ("str", "builtins.str")
    assert errors == [("12", 'Missing named argument "queue" for "process"  [call-arg]')], \
        out.stdout
