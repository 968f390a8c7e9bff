"""The client's checks of what a call is given, before anything is sent.

A call's options (``priority``, ``delay_s``, ``lease_s``...) are refused when they
are not finite or lie outside the broker's limits (:mod:`broker.limits`, the same
names the broker checks against), and a payload or result when it holds a NaN or
an infinity: JSON has neither, and orjson would write ``null`` (so ``push(nan)``
stored ``null``, a ``delay_s`` of ``inf`` or ``nan`` meant "now" and a ``lease_s``
of ``nan`` 30 s). Each refusal is an :class:`InvalidArgument`, one line naming
the field, with at most a short prefix of the bad value. The checks are the
broker's own (:mod:`broker.fields`), so what passes here the broker takes, and
a refusal reads as the broker's would.

Numbers are written exactly (:func:`broker.wire.dumps`): an integer beyond 64
bits in full (a ``priority`` of ``2**70`` raised a bare ``TypeError``), a number
read from JSON (:func:`broker.wire.loads`) as it was spelt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from broker import fields
from broker.errors import InvalidRequest, shown
from broker.fields import JOB_OPTIONS
from broker.limits import MAX_DELAY_S, MAX_KEY_CHARS, MAX_PRIORITY
from broker.wire import NonFinite, dumps, non_finite


class InvalidArgument(InvalidRequest, ValueError):
    """A call's argument the broker would refuse (or silently change), refused
    before anything is sent. An ``InvalidRequest`` (code ``invalid_request``) and
    a ``ValueError``."""


def number(name: str, value: Any, lo: float, hi: float) -> Any:
    """``value`` if it is a finite number (not a bool) within [lo, hi]
    (:func:`broker.fields.number`, refusing with :class:`InvalidArgument`)."""
    return fields.number(name, value, lo, hi, InvalidArgument)


def integer(name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` if it is an integer (not a bool) within [lo, hi]
    (:func:`broker.fields.integer`, refusing with :class:`InvalidArgument`)."""
    return fields.integer(name, value, lo, hi, InvalidArgument)


def text(name: str, value: Any, max_chars: int) -> str:
    """``value`` if it is a string of 1..max_chars characters
    (:func:`broker.fields.text`, refusing with :class:`InvalidArgument`)."""
    return fields.text(name, value, max_chars, InvalidArgument)


def job_options(options: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``options`` (a job's options, none None) if each is within the broker's limits
    (:data:`broker.fields.JOB_OPTIONS`)."""
    for name, value in options.items():
        # the usual values pass these comparisons (NaN fails every one); a value that
        # does not goes through its check, which says what is wrong
        kind = type(value)
        if name == "priority":
            usual = kind is int and -MAX_PRIORITY <= value <= MAX_PRIORITY
        elif name == "delay_s":
            usual = (kind is float or kind is int) and 0 <= value <= MAX_DELAY_S
        else:
            usual = name == "key" and kind is str and 0 < len(value) <= MAX_KEY_CHARS
        if usual:
            continue
        check = JOB_OPTIONS.get(name)
        if check is None:
            raise InvalidArgument(f"unknown job option {where}{shown(name)}")
        check(f"{where}{name}", value, InvalidArgument)
    return options


def json_bytes(value: Any, where: str, default: Callable[[Any], Any] | None = None) -> bytes:
    """``value`` as JSON with exact numbers; ``InvalidArgument`` naming the place
    (``where`` and a path in it) of a NaN or an infinity."""
    try:
        out = orjson.dumps(value, default=default)
    except orjson.JSONEncodeError:
        try:
            out = dumps(value, default=default)  # an ExactNumber or a big int
        except NonFinite as exc:
            raise InvalidArgument(f"{where or 'a value'}: {exc}; JSON numbers are "
                                  "finite") from None
    if b"null" in out:  # where orjson wrote a NaN or an infinity, if anywhere
        found = non_finite(value, where)
        if found is not None:
            raise InvalidArgument(f"{found} is not a finite number (NaN or infinity); "
                                  "JSON has none")
    return out
