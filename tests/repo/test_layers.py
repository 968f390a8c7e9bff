"""The layering rule (docs/architecture.md) as tests: what the client loads, and
every import deferred into a function body, listed with its reason.

The rule itself (imports only downwards, no cycles) is the import-linter
contract in pyproject.toml, which ``make test`` runs as ``lint-imports``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Every import of a project module made inside a function, and why it is not
#: at the top of its module. Nothing here dodges an import cycle.
DEFERRED = {
    # osqueue_spark reaches the broker's service and server only from here
    ("osqueue_spark/embedded.py", "broker.http.server"): "the embedded broker",
    ("osqueue_spark/embedded.py", "broker.service.config"): "the embedded broker",
    ("osqueue_spark/embedded.py", "broker.storage"): "the embedded broker",
    # the package's names that need pyspark (an optional extra) load on first use
    ("osqueue_spark/__init__.py", "osqueue_spark.datasource.source"): "needs pyspark",
    ("osqueue_spark/__init__.py", "osqueue_spark"): "needs pyspark (workers)",
    ("osqueue_spark/__init__.py", "osqueue_spark.sink"): "needs pyspark",
    ("osqueue_spark/datasource/__init__.py", "osqueue_spark.datasource"): "needs pyspark (source)",
    ("osqueue_spark/pipelines/demo.py", "osqueue_spark.pipelines.spark_demo"): "needs pyspark",
    # storage (and its cloud SDKs) only for a client given a store URL to find its broker
    ("osqueue_spark/client.py", "broker.storage"): "optional SDKs",
    # each cloud store's SDK is an optional extra
    ("broker/storage/__init__.py", "broker.storage.azure"): "optional SDK (azure)",
    ("broker/storage/__init__.py", "broker.storage.gcs"): "optional SDK (gcp)",
}


def deferred_project_imports() -> set[tuple[str, str]]:
    found = set()
    for path in sorted([*ROOT.glob("broker/**/*.py"), *ROOT.glob("osqueue_spark/**/*.py")]):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                for name in names:
                    if name.split(".")[0] in ("broker", "osqueue_spark"):
                        found.add((str(path.relative_to(ROOT)), name))
    return found


def test_every_deferred_project_import_is_listed_with_its_reason() -> None:
    assert deferred_project_imports() == set(DEFERRED)


def test_the_client_loads_only_broker_leaves() -> None:
    code = ("import sys, osqueue_spark.client; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('broker'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    assert len(out) <= 8, out
    heavy = [m for m in out if m.split(".")[1:2] in (["model"], ["commit"], ["service"],
                                                      ["http"], ["storage"])]
    assert heavy == [], heavy
    assert "broker.wire" in out  # what the client shares with the broker


def test_the_import_contract_holds() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:]
