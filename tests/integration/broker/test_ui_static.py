"""The dashboard's files: the vendored ones are the bytes VENDORED.md records (version,
license, sha256), and a non-editable install ships every template and static file."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
UI = ROOT / "broker" / "http" / "ui"
OWN = {"dashboard.js", "dashboard.css", "VENDORED.md", "LICENSE-htmx.txt", "LICENSE-uplot.txt"}


def test_each_vendored_file_is_the_one_its_row_records() -> None:
    table = (UI / "static" / "VENDORED.md").read_text()
    rows = dict(re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$", table, re.MULTILINE))
    vendored = {p.name for p in (UI / "static").iterdir()} - OWN
    assert set(rows) == vendored
    for name, digest in rows.items():
        assert hashlib.sha256((UI / "static" / name).read_bytes()).hexdigest() == digest, name
    assert "0BSD" in table and "MIT" in table
    assert "Zero-Clause BSD" in (UI / "static" / "LICENSE-htmx.txt").read_text()
    assert "MIT License" in (UI / "static" / "LICENSE-uplot.txt").read_text()


def test_a_build_ships_every_template_and_static_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("broker", "osqueue_spark"):
        shutil.copytree(ROOT / package, src / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q",
                    "build_py", "--build-lib", str(tmp_path / "lib")], cwd=src, check=True,
                   capture_output=True)
    built = tmp_path / "lib" / "broker" / "http" / "ui"
    for folder in ("templates", "static"):
        want = sorted(p.name for p in (UI / folder).iterdir())
        assert sorted(p.name for p in (built / folder).iterdir()) == want
