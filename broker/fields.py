"""A field's value checked, once for the broker and the client: numbers,
integers and text within bounds, and a job's options.

The broker's checks of untrusted input (:mod:`broker.model.checks`, for
request bodies and staged lines) and the client's checks of a call's
arguments (:mod:`osqueue_spark.args`, before anything is sent) both call these,
so a value the client lets through is one the broker takes, and a refusal
reads the same on both sides. Each check raises ``error`` (``InvalidRequest``,
or the client's ``InvalidArgument``), one line naming the field (``name``, as
the caller spells it) and quoting the value by a short prefix
(:func:`broker.errors.shown`); bounds come from :mod:`broker.limits`. A value
that passes is returned as given (an ``int`` stays an ``int``: the client
sends it as it was passed).

A leaf: imports the broker's errors and limits only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from broker.errors import InvalidRequest, OsqueueError, shown
from broker.limits import MAX_ATTEMPTS, MAX_DELAY_S, MAX_GROUP_CHARS, MAX_KEY_CHARS, MAX_PRIORITY

Error = type[OsqueueError]


def number(name: str, value: Any, lo: float, hi: float, error: Error = InvalidRequest) -> Any:
    """``value`` if it is a finite number (not a bool) within ``[lo, hi]``."""
    # (a tuple: ``int | float`` makes a union object each call, on every claim)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{name} must be a number, got {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise error(f"{name} must be a finite number, got {shown(value)}")
    if not lo <= value <= hi:  # (exact for an int of any size: no overflow)
        raise error(f"{name} must be within [{lo}, {hi}], got {shown(value)}")
    return value


def integer(name: str, value: Any, lo: int, hi: int, error: Error = InvalidRequest) -> int:
    """``value`` if it is an integer (not a bool) within ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{name} must be an integer, got {shown(value)}")
    if not lo <= value <= hi:
        raise error(f"{name} must be within [{lo}, {hi}], got {shown(value)}")
    return value


def text(name: str, value: Any, max_chars: int, error: Error = InvalidRequest) -> str:
    """``value`` if it is a string of 1..``max_chars`` characters."""
    if not isinstance(value, str) or not 0 < len(value) <= max_chars:
        raise error(f"{name} must be a string of 1..{max_chars} characters, "
                    f"got {shown(value)}")
    return value


def error_text(value: str) -> str:
    """A failure's error text as a head can hold it: ``value`` itself, unless it
    holds lone surrogates (as a message naming a file whose name is not UTF-8,
    from ``os.listdir``, does), which no UTF-8 object can: each becomes its ``\\udcXX`` escape.
    An error text is a diagnostic, so an odd one is kept readable, never refused
    (a refused fail would leave its job claimed until its lease ran out)."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


#: The characters a group name may not hold: the C0 controls and DEL.
#: control characters, and lone surrogates (no UTF-8 head could hold them)
_NOT_IN_GROUPS = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def group(name: str, value: Any, error: Error = InvalidRequest) -> str:
    """``value`` if it is a group name: a string of 1..:data:`MAX_GROUP_CHARS`
    characters without control characters (U+0000-U+001F, U+007F) or lone
    surrogates; the one rule, for the client and the broker
    (:func:`broker.model.groups.names.check_group` applies it)."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_GROUP_CHARS \
            or _NOT_IN_GROUPS.search(value) is not None:
        raise error(f"{name}: group must be a string of 1..{MAX_GROUP_CHARS} characters "
                    f"without control characters, got {shown(value)}")
    return value


#: A job's options and the check of each (``check(name, value, error)``); an
#: option left out (or None) is the queue's default: priority 0, no delay, the
#: queue's ``max_attempts``, no idempotency key, no group.
JOB_OPTIONS: dict[str, Callable[[str, Any, Error], Any]] = {
    "priority": lambda n, v, e: integer(n, v, -MAX_PRIORITY, MAX_PRIORITY, e),
    "delay_s": lambda n, v, e: number(n, v, 0.0, MAX_DELAY_S, e),
    "max_attempts": lambda n, v, e: integer(n, v, 1, MAX_ATTEMPTS, e),
    "key": lambda n, v, e: text(n, v, MAX_KEY_CHARS, e),
    "group": group,
}
JOB_OPTION_FIELDS = frozenset(JOB_OPTIONS)
