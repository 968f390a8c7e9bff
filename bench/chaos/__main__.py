"""``python -m bench.chaos``: the same as ``python bench/chaos.py``."""

from __future__ import annotations

import sys

from bench.chaos.cli import main

sys.exit(main())
