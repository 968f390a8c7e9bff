"""The worked example of docs/groups.md (a rate-limited API called from Spark,
per API key) runs as printed on a real local SparkSession: every request is
completed once, no key ever had more calls at once than its limit, and the
queue object afterwards holds no job (each was completed and archived once)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from broker.storage import FileStore
from tests.support.inprocess import archive_lines, stored

pytestmark = pytest.mark.spark

DOC = Path(__file__).resolve().parents[2] / "docs" / "groups.md"


def _example() -> str:
    """The python block right after ``<!-- groups-spark-example -->``."""
    pattern = r"<!-- groups-spark-example -->\n```python\n(.*?)\n```"
    found = re.findall(pattern, DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(found) == 1, "docs/groups.md needs exactly one example block after its marker"
    return found[0] + "\n"


def test_groups_doc_example_runs_within_each_keys_limit(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # (the example's store is ./queues)
    code = compile(_example(), str(DOC), "exec")
    exec(code, {"__name__": "groups_doc_example"})  # (its functions pickle by value)
    lines = capsys.readouterr().out.splitlines()
    assert ast.literal_eval(lines[0]) == {"completed": 40}
    most = {key: int(n) for key, n in (line.split() for line in lines[1:])}
    assert set(most) == {"key-0", "key-1", "key-2", "key-3"}
    assert most["key-3"] == 1
    assert all(1 <= most[key] <= 2 for key in ("key-0", "key-1", "key-2")), most

    store = FileStore(str(tmp_path / "queues"))
    state = stored(store, "api-calls")
    assert state.counters.completed == 40 and len(state.jobs) == 0
    done = [line for line in archive_lines(store, "api-calls") if line["status"] == "completed"]
    assert sorted(line["payload"]["text"] for line in done) == \
        sorted(f"request {i}" for i in range(40))
