"""The long tier: the long variants of random and chaos runs, which ``make test``
leaves out (``-m "not long"``) and ``make long`` runs. A run moves there only
beside a shorter variant of it that stays in ``make test`` with the same checks
(:func:`short_and_long`), so ``make test`` still runs every check, on less work.
"""

from __future__ import annotations

from typing import Any

import pytest


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
