"""How pytest-xdist hands the suite to its workers (``make test``: ``-n 4 --dist
loadgroup``): every test of a file that takes a SparkSession goes to one worker, as one
unit of work, so the suite starts one JVM and one Spark Connect server, not one pair
per worker (each pair costs about a minute of CPU and two GiB of memory on the 2-core
machine); every other test is its own unit, given to whichever worker is free.

This stands in for xdist's own ``loadgroup``, which reads ``xdist_group`` marks by
renaming each marked item's node id: pytest 9.2's node ids can no longer be renamed, so
those marks group nothing (xdist 3.8). The controller never collects, so a file's
group is read from its source: a file with a function (a test or a fixture) that takes
``spark``, ``spark_connect`` or ``any_spark`` is a Spark file.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

#: The fixtures of tests/conftest.py that start a JVM.
SPARK_FIXTURES = frozenset({"spark", "spark_connect", "any_spark"})
SPARK_GROUP = "spark"


@functools.cache
def takes_spark(path: str) -> bool:
    """Whether a function in the test file at ``path`` takes a Spark fixture; False
    for a file that cannot be read or parsed (its tests then run alone)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               and SPARK_FIXTURES.intersection(a.arg for a in node.args.args)
               for node in ast.walk(tree))


class SparkGroupScheduling(LoadScopeScheduling):
    """Each test is its own unit of work, except the tests of Spark files: one unit."""

    def __init__(self, config: object, log: object = None, rootdir: Path | None = None) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self.rootdir = rootdir or Path.cwd()

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return SPARK_GROUP if takes_spark(str(self.rootdir / path)) else nodeid
