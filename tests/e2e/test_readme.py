"""The README: its five-minute example runs, twice in a row, as it says; it stays short.

The example is the ```python block right after ``<!-- readme-example -->``; what it
prints is the block right after ``<!-- readme-example-output -->``. The test runs the
example as a script in a fresh working directory with this interpreter, twice (the
second run finds the first run's queue in ``./queues``), with pyspark made
unimportable: the plain-client part must not need it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.readme import block_after

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_WORDS = 1100

#: Runs the script named by argv[1] as __main__ with every ``import pyspark...`` failing
#: (a finder that refuses it, so ``"pyspark" in sys.modules`` stays False).
NO_PYSPARK = """
import runpy, sys

class NoPyspark:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pyspark":
            raise ImportError("pyspark is blocked: the example must not need it")
        return None

sys.meta_path.insert(0, NoPyspark())
runpy.run_path(sys.argv[1], run_name="__main__")
"""


def test_five_minute_example_runs_twice_as_it_says(tmp_path: Path) -> None:
    code = block_after("readme-example", "python")
    expected = block_after("readme-example-output", "text")
    script = tmp_path / "quickstart.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    for run in (1, 2):
        proc = subprocess.run([sys.executable, "-c", NO_PYSPARK, str(script)], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"run {run} failed:\n{proc.stdout}\n{proc.stderr}"
        assert proc.stdout == expected, f"run {run} printed:\n{proc.stdout}\n{proc.stderr}"
    assert (tmp_path / "queues" / "docs" / "queue.json").is_file()


#: As if pyspark were not installed: every ``import pyspark...`` raises the
#: ModuleNotFoundError a missing package raises (naming it).
PYSPARK_MISSING = """
import sys

from tests.support.readme import block_after

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pyspark":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
"""


def test_the_examples_imports_need_no_pyspark_and_spark_names_say_what_to_install() -> None:
    code = block_after("readme-example", "python")
    imports = "\n".join(line for line in code.splitlines()
                        if line.startswith(("import ", "from ")))
    assert "from osqueue_spark import" in imports
    check = PYSPARK_MISSING + imports + """
try:
    from osqueue_spark import register
except ImportError as exc:
    print(exc)
print("pyspark" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "osqueue_spark.register needs the spark extra (pyspark is missing): install "
        "osqueue_spark with [spark] (a checkout or a wheel of it), or pip install "
        "'pyspark[connect]>=4.0,<4.4' 'pandas>=2.2,<3' 'pyarrow>=15'", "False"]


def test_the_spark_extra_hint_names_what_the_extra_holds() -> None:
    """The hint's pip line is the spark extra of pyproject.toml, package for package
    (the extra's name alone, ``osqueue-spark[spark]``, is on no index)."""
    import tomllib

    from osqueue_spark import SPARK_EXTRA_HINT

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["spark"]
    assert SPARK_EXTRA_HINT.endswith("pip install " + " ".join(f"'{r}'" for r in extra))


def test_the_install_section_names_no_package_index_release() -> None:
    text = README.read_text(encoding="utf-8")
    install = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "osqueue-spark[" not in install and "pip install osqueue-spark" not in install
    assert "make wheel" in install and "[spark]" in install


def test_readme_is_short_and_self_contained() -> None:
    text = README.read_text(encoding="utf-8")
    words = len(text.split())
    assert words <= MAX_WORDS, f"README.md has {words} words; keep it to {MAX_WORDS}"
    assert "SPEC.md" not in text
    assert "<!-- LEAD" not in text


def test_readme_links_point_at_files() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"
