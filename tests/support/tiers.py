"""Test tiers: which cases of a random run the one-minute ``make check`` runs.

``make check`` deselects ``-m slow``; ``make test`` runs everything. A random run
parametrized by seed keeps its first ``fast`` seeds in the quick tier, with all
its checks, and the rest in the slow one (same test, more seeds).
"""

from __future__ import annotations

import os
from typing import Any

import pytest


def seeds(n: int, fast: int = 1) -> list[Any]:
    """Seeds ``0 .. n - 1`` for ``pytest.mark.parametrize``: the first ``fast``
    plain, the others marked slow."""
    return [*range(min(fast, n)),
            *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(fast, n))]


#: ``make check`` sets ``OSQ_TESTS_TIER=quick``: hypothesis runs take a fifth of
#: their examples there (the same properties; ``make test`` runs them all).
QUICK = os.environ.get("OSQ_TESTS_TIER") == "quick"


def examples(n: int) -> int:
    """``max_examples`` for a property or state machine: ``n``, or in the quick
    tier a fifth of it (at least 10)."""
    return max(10, n // 5) if QUICK else n
