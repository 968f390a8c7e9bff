"""Request bodies -> operations, results -> response bodies, for the HTTP API.

Validation is explicit and cheap (no model layer on the hot path); every
problem raises ``InvalidRequest`` (422) naming the field, and nothing is
applied. Bodies that are not JSON raise ``RequestError`` (400).
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from broker import timefmt, transitions
from broker.errors import InvalidRequest, RequestError

_MISSING = object()


def parse_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{where} must be a JSON object")
    return value


def _list(body: dict[str, Any], name: str, max_items: int = 100_000) -> list[Any]:
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


def _str(body: dict[str, Any], name: str, default: str | None, *, max_len: int = 512,
         where: str = "") -> str | None:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str) or not 0 < len(value) <= max_len:
        raise InvalidRequest(f"field '{where}{name}' must be a string of 1..{max_len} characters")
    return value


_PLAIN_FIELDS = frozenset({"payload"})
_SIMPLE_DEFAULTS = {"priority": 0, "delay_s": 0, "max_attempts": None, "key": None}


def parse_new_jobs(body: dict[str, Any]) -> list[transitions.NewJob]:
    jobs = []
    dumps, new_job = orjson.dumps, transitions.NewJob
    for i, raw in enumerate(_list(body, "jobs")):
        # fast path: {"payload": ...} alone, or with every option at its default
        if type(raw) is dict and "payload" in raw and (
            raw.keys() == _PLAIN_FIELDS
            or all(_SIMPLE_DEFAULTS.get(k, k) == v and type(v) is not bool
                   for k, v in raw.items() if k != "payload")
        ):
            jobs.append(new_job(dumps(raw["payload"])))
            continue
        where = f"jobs[{i}]."
        item = _obj(raw, f"jobs[{i}]")
        if "payload" not in item:
            raise InvalidRequest(f"field '{where}payload' is required")
        delay = _num(item, "delay_s", 0.0, hi=10 * 365 * 86400.0, where=where) or 0.0
        jobs.append(transitions.NewJob(
            payload=orjson.dumps(item["payload"]),
            priority=_int(item, "priority", 0, lo=-transitions.MAX_PRIORITY,
                          hi=transitions.MAX_PRIORITY, where=where) or 0,
            delay_ms=round(delay * 1000),
            max_attempts=_int(item, "max_attempts", None, lo=1, hi=1000, where=where),
            key=_str(item, "key", None, where=where),
        ))
    return jobs


def parse_push(body: Any) -> list[transitions.NewJob]:
    return parse_new_jobs(_obj(body, "request body"))


def parse_stage(body: Any) -> tuple[str, list[transitions.NewJob]]:
    body = _obj(body, "request body")
    write_id = _str(body, "write_id", None, max_len=300)
    if write_id is None:
        raise InvalidRequest("field 'write_id' is required")
    return write_id, parse_new_jobs(body)


def parse_publish(body: Any) -> tuple[str, list[str], str | None]:
    body = _obj(body, "request body")
    prefix = _str(body, "prefix", None, max_len=300)
    if prefix is None:
        raise InvalidRequest("field 'prefix' is required")
    keep = body.get("keep", [])
    if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
        raise InvalidRequest("field 'keep' must be a list of write ids")
    return prefix, keep, _str(body, "once", None, max_len=512)


def parse_claim(body: Any) -> dict[str, Any]:
    body = _obj(body, "request body")
    worker = _str(body, "worker", None, max_len=200)
    if worker is None:
        raise InvalidRequest("field 'worker' is required")
    return {
        "worker": worker,
        "max_jobs": _int(body, "max_jobs", 1, lo=1, hi=10_000),
        "lease_s": _num(body, "lease_s", 30.0, lo=0.001, hi=86_400.0),
        "wait_s": _num(body, "wait_s", 0.0, hi=3_600.0),
    }


def _tokens(values: list[Any], where: str) -> list[str]:
    for i, tok in enumerate(values):
        if not isinstance(tok, str) or not 0 < len(tok) <= 300:
            raise InvalidRequest(f"{where}[{i}] must be a token string")
    return values


def parse_heartbeat(body: Any) -> tuple[list[str], float]:
    body = _obj(body, "request body")
    tokens = _tokens(_list(body, "tokens"), "tokens")
    return tokens, _num(body, "lease_s", 30.0, lo=0.001, hi=86_400.0) or 30.0


def parse_complete(body: Any) -> list[transitions.CompleteItem]:
    items = []
    for i, raw in enumerate(_list(_obj(body, "request body"), "items")):
        item = _obj(raw, f"items[{i}]")
        token = _tokens([item.get("token")], f"items[{i}].token")[0]
        result = item.get("result")
        items.append(transitions.CompleteItem(token, None if result is None
                                              else orjson.dumps(result)))
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
        retry = _num(item, "retry_in_s", None, hi=10 * 365 * 86400.0, where=where)
        items.append(transitions.FailItem(token, error,
                                          None if retry is None else round(retry * 1000)))
    return items


def claimed_to_json(jobs: list[transitions.ClaimedJob]) -> list[dict[str, Any]]:
    return [
        {
            "id": j.id,
            "payload": orjson.Fragment(j.payload),
            "token": j.token,
            "attempt": j.attempt,
            "lease_expires_at": timefmt.fmt(j.lease_expires_ms),
        }
        for j in jobs
    ]


def items_to_json(items: list[transitions.ItemResult]) -> list[dict[str, Any]]:
    out = []
    for r in items:
        row: dict[str, Any] = {"token": r.token, "ok": r.ok, "reason": r.reason}
        if r.status is not None:
            row["status"] = r.status
        out.append(row)
    return out
