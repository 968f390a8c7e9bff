"""Store URL query options, user info and the cloud clients' defaults, shared by every
store URL.

``query_options`` refuses unknown and repeated options (naming them, never their
values, which may hold a secret); ``positive`` parses a number that must be finite
and > 0; ``refuse_user_info`` refuses a user or password in a URL without repeating
it. Each raises ``InvalidRequest`` and changes nothing. ``shown_url`` is a store URL
as messages may quote it.
"""

from __future__ import annotations

import math
from typing import TypeVar
from urllib.parse import SplitResult, parse_qs, urlsplit

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
        raise InvalidRequest(f"{label} option {name}={_prefix(raw)!r} must be {what} > 0")
    return value


#: Longest part of a bad value an error message quotes (characters).
SHOWN_CHARS = 40

#: Store URL schemes whose host and path messages may show.
_SCHEMES = ("file", "s3", "gs", "az", "abfss", "memory")


def _prefix(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def shown_url(url: str) -> str:
    """``url`` as a message may quote it: scheme, host and path, never a user or
    password (an ``abfss://`` container before the ``@`` stays) nor the query (a SAS,
    an endpoint with credentials); only the scheme of an unknown scheme (a URL
    without one may be ``KEY:SECRET@bucket``); cut to 120 characters."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a malformed URL)"
    if parts.scheme not in _SCHEMES:
        return f"{parts.scheme}://..." if parts.scheme else "(a URL without a scheme)"
    user, at, host = parts.netloc.rpartition("@")
    if at and not _is_container(parts.scheme, user):
        user = "***"
    shown = f"{parts.scheme}://{user}{at}{host}{parts.path}"
    return shown if len(shown) <= 120 else shown[:117] + "..."


def refuse_user_info(parts: SplitResult, what: str = "store URLs") -> None:
    """``InvalidRequest`` if ``parts`` carries a user or password before its host (an
    ``abfss://`` URL's ``container@`` is its form, not user info). The message names
    neither: credentials belong in the environment."""
    user, at, _ = parts.netloc.rpartition("@")
    if at and not _is_container(parts.scheme, user):
        raise InvalidRequest(
            f"{what} must not carry a user or password (the URL is not repeated here); "
            "give credentials in the environment (docs/stores.md)")


def _is_container(scheme: str, user: str) -> bool:
    return scheme == "abfss" and bool(user) and ":" not in user and "@" not in user
