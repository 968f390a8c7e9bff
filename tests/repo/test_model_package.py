"""broker.model as a package: it exports nothing (callers import the module
that defines a name), and reading the bytes loads the state and the format,
not the rules. (Which module may import which: the import contracts
``model-layers``, ``model-format`` and ``model-segments``, run by
tests/repo/test_layers.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The model's rules and segment claims: nothing a reader of the bytes needs.
RULES = ("ops", "checks", "lifecycle", "held", "segments", "idempotency", "views", "inserts",
         "queue_rules", "cancels", "browse", "transitions")


def loaded_after(code: str) -> list[str]:
    """The broker.model modules a fresh interpreter has loaded after ``code``."""
    code += ("\nimport sys\n"
             "print(' '.join(sorted(m for m in sys.modules if m.startswith('broker.model'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return out.stdout.split()


def test_the_package_exports_no_name() -> None:
    code = ("import broker.model\n"
            "print(' '.join(n for n in vars(broker.model) if not n.startswith('_')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.split() == []


def test_reading_the_bytes_loads_no_rule() -> None:
    loaded = loaded_after("import broker.model.format.decode, broker.model.format.archive, "
                          "broker.model.format.segment_format")
    assert "broker.model.format.decode" in loaded and "broker.model.state" in loaded
    rules = [m for m in loaded if m.count(".") >= 2 and m.split(".")[2] in RULES]
    assert rules == [], rules
