"""Chaos runner: real brokers, real clients, a seeded nemesis, then a check of the store.

The entry point of ``python bench/chaos.py ...`` (``--help`` for everything); the
runner itself is the package bench/chaos/. This checkout goes first on the path, so
the script runs with or without it on PYTHONPATH, and never runs another checkout's
runner that comes earlier on it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) in sys.path:
    sys.path.remove(str(ROOT))
sys.path.insert(0, str(ROOT))

from bench.chaos.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
