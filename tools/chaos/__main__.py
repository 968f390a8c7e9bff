"""``python -m tools.chaos``: the chaos runner's entry point (``--help`` for everything)."""

from __future__ import annotations

import sys

from tools.chaos.cli import main

sys.exit(main())
