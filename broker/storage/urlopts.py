"""Store URL query options and the cloud clients' defaults, shared by every store URL.

``query_options`` refuses unknown and repeated options (naming them, never their
values, which may hold a secret); ``positive`` parses a number that must be finite
and > 0. Both raise ``InvalidRequest`` and change nothing.
"""

from __future__ import annotations

import math
from typing import TypeVar
from urllib.parse import parse_qs

from broker.errors import InvalidRequest

#: Attempts per call for transient failures, and connect/read timeout (seconds),
#: of the S3, Azure and GCS stores unless their URL says otherwise.
DEFAULT_RETRIES = 5
DEFAULT_TIMEOUT_S = 10.0

N = TypeVar("N", int, float)


def query_options(query: str, known: tuple[str, ...], kind: str, hint: str = "") -> dict[str, str]:
    """The URL's query options (``kind``: "S3", "GCS"...; ``hint`` ends the message
    that names unknown ones)."""
    parsed = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(parsed) - set(known))
    if unknown:
        raise InvalidRequest(
            f"unknown {kind} store URL option(s) {', '.join(unknown)}; "
            f"known options: {', '.join(known)}{hint}"
        )
    repeated = sorted(name for name, values in parsed.items() if len(values) > 1)
    if repeated:
        raise InvalidRequest(
            f"{kind} store URL option(s) given more than once: {', '.join(repeated)}")
    return {name: values[0] for name, values in parsed.items()}


def positive(opts: dict[str, str], name: str, kind: type[N], default: N,
             label: str = "store URL") -> N:
    """Option ``name`` parsed as ``kind``, which must be finite and > 0, or ``default``."""
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = kind(0)
    if not (math.isfinite(value) and value > 0):
        what = "a whole number" if kind is int else "a number"
        raise InvalidRequest(f"{label} option {name}={raw!r} must be {what} > 0")
    return value
