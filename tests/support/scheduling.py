"""How pytest-xdist hands the suite to its workers (``make test``: ``-n 4 --dist
loadgroup``): the Spark tests make two units of work, each given whole to one worker:
the tests run on the classic session (``spark``, ``any_spark[classic]``) and those run
on the Connect session (``spark_connect``, ``any_spark[connect]``). So each of those two
workers starts one JVM (the classic session, or the Connect server's), as one worker
starting both did, and the Spark tests' wall time is split in two; every other test is
its own unit, given to whichever worker is free.

This stands in for xdist's own ``loadgroup``, which reads ``xdist_group`` marks by
renaming each marked item's node id: pytest 9.2's node ids can no longer be renamed, so
those marks group nothing (xdist 3.8). The controller never collects, so a test's unit
is read from its file's source and its node id: a file with a function (a test or a
fixture) that takes ``spark``, ``spark_connect`` or ``any_spark`` is a Spark file; in
it, a test that takes ``spark_connect``, or takes ``any_spark`` with the ``connect``
parameter, is a Connect test, and every other test a classic one (including one that
takes no Spark fixture itself but may take one through a fixture of the file).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

#: The fixtures of tests/conftest.py that start a JVM.
SPARK_FIXTURES = frozenset({"spark", "spark_connect", "any_spark"})
#: The two units of work of the Spark tests.
CLASSIC_GROUP = "spark-classic"
CONNECT_GROUP = "spark-connect"


@functools.cache
def spark_functions(path: str) -> dict[str, frozenset[str]] | None:
    """The Spark fixtures each function of the test file at ``path`` takes, by the
    function's name (functions that take none are left out); None for a file with
    no such function, or that cannot be read or parsed (its tests then run alone)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    found = {node.name: SPARK_FIXTURES.intersection(a.arg for a in node.args.args)
             for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    taking = {name: fixtures for name, fixtures in found.items() if fixtures}
    return taking or None


def takes_spark(path: str) -> bool:
    """Whether a function in the test file at ``path`` takes a Spark fixture."""
    return spark_functions(path) is not None


def spark_unit(nodeid: str, functions: dict[str, frozenset[str]]) -> str:
    """The unit of work (:data:`CLASSIC_GROUP` or :data:`CONNECT_GROUP`) of the test
    ``nodeid`` of a Spark file whose functions take ``functions``."""
    name = nodeid.rsplit("::", 1)[-1]
    base, _, params = name.partition("[")
    fixtures = functions.get(base, frozenset())
    if "spark_connect" in fixtures:
        return CONNECT_GROUP
    if "any_spark" in fixtures and "connect" in params.rstrip("]").split("-"):
        return CONNECT_GROUP
    return CLASSIC_GROUP


class SparkGroupScheduling(LoadScopeScheduling):
    """Each test is its own unit of work, except the Spark tests: two units, the
    classic ones and the Connect ones."""

    def __init__(self, config: object, log: object = None, rootdir: Path | None = None) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self.rootdir = rootdir or Path.cwd()

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        functions = spark_functions(str(self.rootdir / path))
        return nodeid if functions is None else spark_unit(nodeid, functions)
