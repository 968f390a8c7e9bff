"""Request bodies -> operations, results -> response bodies, for the HTTP API.

Validation is explicit and cheap (no model layer on the hot path); every
problem raises ``InvalidRequest`` (422) naming the field, and nothing is
applied. Bodies that are not JSON raise ``RequestError`` (400).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any, cast

import orjson

from broker import timefmt, transitions
from broker.columns import plain_rows
from broker.errors import InvalidRequest, PayloadTooLarge, RequestError
from broker.limits import (
    DEFAULT_LEASE_S,
    MAX_ATTEMPTS,
    MAX_CLAIM_JOBS,
    MAX_DELAY_S,
    MAX_DEPTH,
    MAX_FLOOR_DIGITS,
    MAX_ITEMS,
    MAX_KEY_CHARS,
    MAX_LEASE_S,
    MAX_ONCE_CHARS,
    MAX_PREFIX_CHARS,
    MAX_PRIORITY,
    MAX_REQUEST_KEY_CHARS,
    MAX_TOKEN_CHARS,
    MAX_WAIT_S,
    MAX_WORKER_CHARS,
    MAX_WRITE_ID_CHARS,
    MIN_LEASE_S,
)

_MISSING = object()

#: A JSON text this short cannot nest deeper than MAX_DEPTH (two bytes a level).
_SHALLOW_BYTES = 2 * MAX_DEPTH


def check_depth(payload: bytes, where: str, *where_args: object) -> None:
    """Refuse a JSON text nested deeper than :data:`MAX_DEPTH` (``InvalidRequest``,
    naming it ``where % where_args``: hot loops pass an index, not a built name).

    Cheap for the usual payload: nesting needs two bytes a level.
    """
    if len(payload) <= _SHALLOW_BYTES:
        return
    opens = payload.count(b"[") + payload.count(b"{")
    if opens <= MAX_DEPTH:
        return
    depth = deepest = 0
    in_string = escaped = False
    for byte in payload:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    if deepest > MAX_DEPTH:
        where = where % where_args if where_args else where
        raise InvalidRequest(f"{where} is nested {deepest} levels deep; "
                             f"at most {MAX_DEPTH} are allowed")


def _dumps_value(value: Any, where: str) -> bytes:
    try:
        out = orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise InvalidRequest(f"{where} cannot be stored: {exc} (at most {MAX_DEPTH} levels "
                             "of nesting)") from None
    check_depth(out, where)
    return out


def parse_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{where} must be a JSON object")
    return value


def _list(body: dict[str, Any], name: str, max_items: int = MAX_ITEMS) -> list[Any]:
    value = body.get(name, _MISSING)
    if value is _MISSING:
        raise InvalidRequest(f"field '{name}' is required")
    if not isinstance(value, list):
        raise InvalidRequest(f"field '{name}' must be a list")
    if not value:
        raise InvalidRequest(f"field '{name}' must not be empty")
    if len(value) > max_items:
        raise InvalidRequest(f"field '{name}' has {len(value)} items; at most {max_items}")
    return value


def _num(body: dict[str, Any], name: str, default: float | None, *, lo: float = 0.0,
         hi: float = math.inf, where: str = "") -> float | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRequest(f"field '{where}{name}' must be a number, got {value!r}")
    if not lo <= value <= hi:
        raise InvalidRequest(f"field '{where}{name}' must be within [{lo}, {hi}], got {value}")
    return float(value)


def _int(body: dict[str, Any], name: str, default: int | None, *, lo: int, hi: int,
         where: str = "") -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"field '{where}{name}' must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise InvalidRequest(f"field '{where}{name}' must be within [{lo}, {hi}], got {value}")
    return value


def _str(body: dict[str, Any], name: str, default: str | None, *, max_len: int = MAX_KEY_CHARS,
         where: str = "") -> str | None:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str) or not 0 < len(value) <= max_len:
        raise InvalidRequest(f"field '{where}{name}' must be a string of 1..{max_len} characters")
    return value


_PLAIN_FIELDS = frozenset({"payload"})
_SIMPLE_DEFAULTS = {"priority": 0, "delay_s": 0, "max_attempts": None, "key": None}


def _options(item: dict[str, Any], where: str) -> tuple[int, int, int | None, str | None]:
    """A job's options (priority, delay in ms, max_attempts, key), checked."""
    delay = _num(item, "delay_s", 0.0, hi=MAX_DELAY_S, where=where) or 0.0
    return (_int(item, "priority", 0, lo=-MAX_PRIORITY,
                 hi=MAX_PRIORITY, where=where) or 0,
            round(delay * 1000),
            _int(item, "max_attempts", None, lo=1, hi=MAX_ATTEMPTS, where=where),
            _str(item, "key", None, where=where))


def parse_new_jobs(body: dict[str, Any]) -> list[transitions.NewJob | bytes]:
    """The jobs of a push body; a job with default options comes back as its
    payload's bytes alone (see :func:`broker.transitions.push_of`)."""
    jobs: list[transitions.NewJob | bytes] = []
    dumps, new_job = orjson.dumps, transitions.NewJob
    for i, raw in enumerate(_list(body, "jobs")):
        # fast path: {"payload": ...} alone, or with every option at its default
        try:
            if type(raw) is dict and "payload" in raw and (
                raw.keys() == _PLAIN_FIELDS
                or all(_SIMPLE_DEFAULTS.get(k, k) == v and type(v) is not bool
                       and (type(v) is not float or k == "delay_s")  # priority 0.0 is no int
                       for k, v in raw.items() if k != "payload")
            ):
                payload = dumps(raw["payload"])
                check_depth(payload, "jobs[%d].payload", i)
                jobs.append(payload)
                continue
        except orjson.JSONEncodeError:
            _dumps_value(raw["payload"], f"jobs[{i}].payload")  # raises, naming the job
        where = f"jobs[{i}]."
        item = _obj(raw, f"jobs[{i}]")
        if "payload" not in item:
            raise InvalidRequest(f"field '{where}payload' is required")
        jobs.append(new_job(_dumps_value(item["payload"], f"jobs[{i}].payload"),
                            *_options(item, where)))
    return jobs


def parse_request_key(raw: bytes | None) -> str | None:
    """An ``Idempotency-Key`` header's value, checked (1..MAX_REQUEST_KEY_CHARS printable ASCII)."""
    if raw is None:
        return None
    if (not 0 < len(raw) <= MAX_REQUEST_KEY_CHARS or not raw.isascii()
            or not all(33 <= c < 127 for c in raw)):
        raise InvalidRequest(f"header Idempotency-Key must be 1..{MAX_REQUEST_KEY_CHARS} "
                             "printable ASCII characters")
    return raw.decode()


def parse_request_floor(raw: bytes | None) -> int | None:
    """An ``Idempotency-Floor`` header's value: the caller's lowest request number
    still awaiting its answer (see :mod:`broker.receipts`)."""
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > MAX_FLOOR_DIGITS:
        raise InvalidRequest("header Idempotency-Floor must be a whole number")
    return int(raw)


def parse_push(body: Any) -> list[transitions.NewJob | bytes]:
    return parse_new_jobs(_obj(body, "request body"))


# -- staged lines ------------------------------------------------------------------
#
# The compact job format (content type ``application/vnd.osqueue.staged``):
# what a Spark task stages (POST /stage), what a staging object holds, and an
# alternative push body. One job a line, ``OPTIONS \t PAYLOAD \n``. OPTIONS is
# empty for default options, else a JSON object with any of priority, delay_s,
# max_attempts, key; PAYLOAD is the job's JSON with no line break in it. A
# stage body starts with one JSON line ``{"write_id": ...}``. Payloads pass
# through as bytes (checked, never decoded and re-encoded), which makes this
# format several times cheaper than a JSON push body.

STAGED_CONTENT_TYPE = "application/vnd.osqueue.staged"
STAGED_OPTION_FIELDS = frozenset({"priority", "delay_s", "max_attempts", "key"})


def staged_line(payload: bytes, options: dict[str, Any] | None = None) -> bytes:
    """One staged line for a job (``payload``: its JSON bytes; line breaks in it,
    which JSON allows only between tokens, are removed by re-encoding)."""
    if b"\n" in payload:
        payload = orjson.dumps(parse_json(payload))
    head = orjson.dumps(options) if options else b""
    return b"%s\t%s\n" % (head, payload)


def parse_staged(data: bytes, *, check: bool, max_payload_bytes: int = 0,
                 where: str = "staged line") -> list[transitions.NewJob | bytes]:
    """Staged lines -> jobs (bare payload bytes for default options, as
    :func:`broker.transitions.push_of` takes them).

    With ``check`` (untrusted input) every payload is parsed as JSON and sized
    and every option validated; raises ``InvalidRequest`` or
    ``PayloadTooLarge`` naming the line. Without (lines the broker checked when
    it staged them) only the options are decoded.
    """
    lines = data.split(b"\n")
    if lines[-1]:
        raise InvalidRequest(f"{where}s must end with a line break")
    del lines[-1]
    loads = orjson.loads
    if data.startswith(b"\t") and data.count(b"\n\t") == len(lines) - 1:
        payloads = [line[1:] for line in lines]
        jobs_ = cast("list[transitions.NewJob | bytes]", payloads)  # list is invariant
        if not check:  # every line has default options
            return jobs_
        try:  # check them all without a Python loop; the loop below names a bad line
            if not payloads or max(map(len, payloads)) <= min(max_payload_bytes,
                                                             2 * MAX_DEPTH):
                deque(map(loads, payloads), maxlen=0)
                return jobs_
        except orjson.JSONDecodeError:
            pass
    jobs: list[transitions.NewJob | bytes] = []
    for i, line in enumerate(lines):
        head, tab, payload = line.partition(b"\t")
        if not tab:
            raise InvalidRequest(f"{where} {i} has no tab between options and payload")
        if check:
            if len(payload) > max_payload_bytes:
                raise PayloadTooLarge(f"{where} {i}: payload is {len(payload)} bytes; "
                                      f"the limit is {max_payload_bytes}")
            try:
                loads(payload)
            except orjson.JSONDecodeError as exc:
                raise InvalidRequest(f"{where} {i}: payload is not valid JSON ({exc})") from None
            check_depth(payload, "%s %d: payload", where, i)
        if not head:
            jobs.append(payload)
            continue
        item = _obj(parse_json(head), f"{where} {i} options")
        unknown = set(item) - STAGED_OPTION_FIELDS
        if unknown:
            raise InvalidRequest(f"{where} {i} has unknown options {sorted(unknown)}")
        jobs.append(transitions.NewJob(payload, *_options(item, f"{where} {i}: ")))
    return jobs


def parse_stage(body: bytes) -> tuple[str, bytes]:
    """A stage request -> ``(write_id, staged lines)``; the lines are checked by
    :meth:`broker.service.Broker.stage`."""
    first, _, lines = body.partition(b"\n")
    header = _obj(parse_json(first), "the first line of the request body")
    write_id = _str(header, "write_id", None, max_len=MAX_WRITE_ID_CHARS)
    if write_id is None:
        raise InvalidRequest("field 'write_id' is required")
    return write_id, lines


def parse_publish(body: Any) -> tuple[str, list[str], str | None]:
    body = _obj(body, "request body")
    prefix = _str(body, "prefix", None, max_len=MAX_PREFIX_CHARS)
    if prefix is None:
        raise InvalidRequest("field 'prefix' is required")
    keep = body.get("keep", [])
    if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
        raise InvalidRequest("field 'keep' must be a list of write ids")
    return prefix, keep, _str(body, "once", None, max_len=MAX_ONCE_CHARS)


def parse_claim(body: Any) -> dict[str, Any]:
    body = _obj(body, "request body")
    worker = _str(body, "worker", None, max_len=MAX_WORKER_CHARS)
    if worker is None:
        raise InvalidRequest("field 'worker' is required")
    return {
        "worker": worker,
        "max_jobs": _int(body, "max_jobs", 1, lo=1, hi=MAX_CLAIM_JOBS),
        "lease_s": _num(body, "lease_s", DEFAULT_LEASE_S, lo=MIN_LEASE_S, hi=MAX_LEASE_S),
        "wait_s": _num(body, "wait_s", 0.0, hi=MAX_WAIT_S),
    }


def _tokens(values: list[Any], where: str) -> list[str]:
    for i, tok in enumerate(values):
        if not isinstance(tok, str) or not 0 < len(tok) <= MAX_TOKEN_CHARS:
            raise InvalidRequest(f"{where}[{i}] must be a token string")
    return values


def parse_heartbeat(body: Any) -> tuple[list[str], float]:
    body = _obj(body, "request body")
    tokens = _tokens(_list(body, "tokens"), "tokens")
    lease = _num(body, "lease_s", DEFAULT_LEASE_S, lo=MIN_LEASE_S, hi=MAX_LEASE_S)
    return tokens, lease or DEFAULT_LEASE_S


def parse_complete(body: Any) -> transitions.CompleteItems:
    """The items of a complete's body, column-wise (see :mod:`broker.columns`)."""
    items = transitions.CompleteItems()
    tokens, results = items.columns
    dumps = orjson.dumps
    for i, raw in enumerate(_list(_obj(body, "request body"), "items")):
        token = raw.get("token") if type(raw) is dict else None
        if type(token) is not str or not 0 < len(token) <= MAX_TOKEN_CHARS:  # say what is wrong
            _tokens([_obj(raw, f"items[{i}]").get("token")], f"items[{i}].token")
        result = raw.get("result")
        try:
            encoded = None if result is None else dumps(result)
        except orjson.JSONEncodeError:
            encoded = _dumps_value(result, f"items[{i}].result")
        if encoded is not None:
            check_depth(encoded, "items[%d].result", i)
        tokens.append(token)
        results.append(encoded)
    return items


def parse_fail(body: Any) -> list[transitions.FailItem]:
    items = []
    for i, raw in enumerate(_list(_obj(body, "request body"), "items")):
        item = _obj(raw, f"items[{i}]")
        where = f"items[{i}]."
        token = _tokens([item.get("token")], f"items[{i}].token")[0]
        error = item.get("error", "")
        if not isinstance(error, str):
            raise InvalidRequest(f"field '{where}error' must be a string")
        retry = _num(item, "retry_in_s", None, hi=MAX_DELAY_S, where=where)
        items.append(transitions.FailItem(token, error,
                                          None if retry is None else round(retry * 1000)))
    return items


def claimed_to_json(jobs: Sequence[transitions.LeasedJob]) -> list[dict[str, Any]]:
    fragment = orjson.Fragment
    times: dict[int, str] = {}  # the jobs of one claim share their expiry
    out = []
    for job_id, payload, token, attempt, expires_ms in plain_rows(jobs):
        expires = times.get(expires_ms)
        if expires is None:
            expires = times[expires_ms] = timefmt.fmt(expires_ms)
        out.append({"id": job_id, "payload": fragment(payload), "token": token,
                    "attempt": attempt, "lease_expires_at": expires})
    return out


def items_to_json(items: Sequence[transitions.ItemResult]) -> list[dict[str, Any]]:
    out = []
    for token, ok, reason, status in plain_rows(items):
        row: dict[str, Any] = {"token": token, "ok": ok, "reason": reason}
        if status is not None:
            row["status"] = status
        out.append(row)
    return out
