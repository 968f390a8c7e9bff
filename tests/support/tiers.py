"""Test tiers.

- The quick tier (``make check``: ``-m "not slow"``, ``OSQ_TESTS_TIER=quick``): a
  random run parametrized by seed keeps its first ``fast`` seeds there, with all
  its checks (:func:`seeds`), and hypothesis runs take a fifth of their examples
  (:func:`examples`); ``make test`` runs every seed and example but those of the
  long tier.
- The long tier (marker ``long``): the long variants of random and chaos runs,
  which ``make test`` leaves out (``-m "not long"``) and ``make long`` runs (a
  seeded random run's later seeds too: :func:`seeds` with ``short``). A run
  moves there only beside a shorter variant of it that stays in ``make test`` with
  the same checks (:func:`short_and_long`), so ``make test`` still runs every
  check, on less work.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

#: ``make check`` sets ``OSQ_TESTS_TIER=quick``: hypothesis runs take a fifth of
#: their examples there (the same properties; ``make test`` runs them all).
QUICK = os.environ.get("OSQ_TESTS_TIER") == "quick"


def seeds(n: int, fast: int = 1, short: int | None = None) -> list[Any]:
    """Seeds ``0 .. n - 1`` for ``pytest.mark.parametrize``: the first ``fast``
    plain, the others marked slow; with ``short``, the seeds from ``short`` on are
    marked long as well (``make long`` only: ``make test`` runs seeds ``0 .. short -
    1``, every check on fewer random runs)."""
    last = n if short is None else min(short, n)
    return [*range(min(fast, last)),
            *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(fast, last)),
            *(pytest.param(seed, marks=[pytest.mark.slow, pytest.mark.long])
              for seed in range(last, n))]


def examples(n: int) -> int:
    """``max_examples`` for a property or state machine: ``n``, or in the quick
    tier a fifth of it (at least 10)."""
    return max(10, n // 5) if QUICK else n


def short_and_long(name: str, short: Any, long: Any) -> pytest.MarkDecorator:
    """Parametrizes a test's ``name`` with the ``short`` value (in ``make test``) and
    the ``long`` one (marked ``long``: ``make long`` only); their ids are
    ``short`` and ``long``."""
    return pytest.mark.parametrize(name, [
        pytest.param(short, id="short"),
        pytest.param(long, id="long", marks=pytest.mark.long),
    ])


def same_work(rate: float, seconds: float, long_s: float) -> str:
    """``rate`` (per second) scaled to give as much work in a run of ``seconds`` as
    ``rate`` gives in one of ``long_s``, as a command-line value: a short chaos
    run makes as many bulk pushes as its long variant (their checks count them)."""
    return str(round(rate * long_s / seconds))
