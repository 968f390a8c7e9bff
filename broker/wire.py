"""What the client and the broker share on the wire: content types, the
staged-line encoding, and a per-token answer.

The compact job format (content type ``application/vnd.osqueue.staged``):
what a Spark task stages (POST /stage), what a staging object holds, and an
alternative push body. One job a line, ``OPTIONS \t PAYLOAD \n``. OPTIONS is
empty for default options, else a JSON object with any of priority, delay_s,
max_attempts, key; PAYLOAD is the job's JSON with no line break in it. A
stage body starts with one JSON line ``{"write_id": ...}``. Payloads pass
through as bytes (checked, never decoded and re-encoded), which makes this
format several times cheaper than a JSON push body. The broker reads it with
:func:`broker.model.checks.parse_staged`.

A leaf: imports nothing of the broker but its errors.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from broker.errors import RequestError

STAGED_CONTENT_TYPE = "application/vnd.osqueue.staged"
STAGED_OPTION_FIELDS = frozenset({"priority", "delay_s", "max_attempts", "key"})


def parse_json(body: bytes) -> Any:
    """``body`` parsed as JSON; ``RequestError`` (400) if it is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None


def encode_staged_line(payload: bytes, options: dict[str, Any] | None = None) -> bytes:
    """One staged line for a job (``payload``: its JSON bytes; line breaks in it,
    which JSON allows only between tokens, are removed by re-encoding)."""
    if b"\n" in payload:
        payload = orjson.dumps(parse_json(payload))
    head = orjson.dumps(options) if options else b""
    return b"%s\t%s\n" % (head, payload)


class ItemResult(NamedTuple):
    """The answer about one token of a heartbeat, complete or fail: ``ok``, or
    why not (``reason``). Shared by the broker and the client."""

    token: str
    ok: bool
    reason: str | None = None
    status: str | None = None  # for fail: "pending" (retrying) or "dead"
