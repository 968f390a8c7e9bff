"""Request bodies -> operations, results -> response bodies, for the HTTP API.

Validation is explicit and cheap (no model layer on the hot path); every
problem raises ``InvalidRequest`` (422) naming the field, and nothing is
applied. A field an object does not know is refused, as the models in
:mod:`broker.http.schemas` refuse it (one ``keys() <= known`` test an object).
Bodies that are not JSON raise ``RequestError`` (400).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from broker import timefmt
from broker.errors import InvalidRequest
from broker.fields import group as check_group
from broker.limits import (
    DEFAULT_LEASE_S,
    MAX_CLAIM_JOBS,
    MAX_DELAY_S,
    MAX_FLOOR_DIGITS,
    MAX_LEASE_S,
    MAX_ONCE_CHARS,
    MAX_PREFIX_CHARS,
    MAX_REQUEST_KEY_CHARS,
    MAX_TOKEN_CHARS,
    MAX_WAIT_S,
    MAX_WORKER_CHARS,
    MAX_WRITE_ID_CHARS,
    MIN_LEASE_S,
)
from broker.model import ops
from broker.model.checks import (
    as_object,
    check_depth,
    dumps_value,
    int_field,
    job_options,
    list_field,
    number_field,
    object_of,
    str_field,
    unknown_field,
)
from broker.model.columns import plain_rows
from broker.wire import parse_json, split_stage_body

#: The bytes a request key is made of: printable ASCII, no space.
_PRINTABLE = bytes(range(33, 127))
_PLAIN_FIELDS = frozenset({"payload"})
_JOB_FIELDS = frozenset({"payload", "priority", "delay_s", "max_attempts", "key", "group"})
_SIMPLE_DEFAULTS = {"priority": 0, "delay_s": 0, "max_attempts": None, "key": None,
                    "group": None}
_GROUPED_FIELDS = frozenset({"payload", "group"})
#: Group names a push body held that passed :func:`broker.fields.group` (a few
#: pushes' worth: cleared when full), so a grouped job's check is one lookup.
_GROUPS_CHECKED: set[str] = set()
_PUSH_FIELDS = frozenset({"jobs"})
_STAGE_FIELDS = frozenset({"write_id"})
_PUBLISH_FIELDS = frozenset({"prefix", "keep", "once"})
_CLAIM_FIELDS = frozenset({"worker", "max_jobs", "lease_s", "wait_s", "wait_for_queue"})
_HEARTBEAT_FIELDS = frozenset({"tokens", "lease_s"})
_ITEMS_FIELDS = frozenset({"items"})
_COMPLETE_FIELDS = frozenset({"token", "result"})
_FAIL_FIELDS = frozenset({"token", "error", "retry_in_s"})


def parse_new_jobs(body: dict[str, Any]) -> list[ops.NewJob | bytes]:
    """The jobs of a push body; a job with default options comes back as its
    payload's bytes alone (see :func:`broker.model.ops.push_of`)."""
    jobs: list[ops.NewJob | bytes] = []
    dumps, new_job = orjson.dumps, ops.NewJob
    for i, raw in enumerate(list_field(body, "jobs")):
        try:
            if type(raw) is dict:
                keys = raw.keys()
                # fast path: {"payload": ...} alone, or with every option at its default
                if keys == _PLAIN_FIELDS or (
                        keys != _GROUPED_FIELDS and "payload" in raw and keys <= _JOB_FIELDS
                        and all(_SIMPLE_DEFAULTS[k] == v and type(v) is not bool
                                and (type(v) is not float or k == "delay_s")  # 0.0 is no int
                                for k, v in raw.items() if k != "payload")):
                    payload = dumps(raw["payload"])
                    check_depth(payload, "jobs[%d].payload", i)
                    jobs.append(payload)
                    continue
                # fast path: {"payload": ..., "group": ...}, as the general way below reads
                # it (the payload checked first; bench/broker_bench.py, grouped rows)
                if keys == _GROUPED_FIELDS:
                    payload = dumps(raw["payload"])
                    check_depth(payload, "jobs[%d].payload", i)
                    group = raw["group"]
                    if group is None:  # (the default: a bare payload, as above)
                        jobs.append(payload)
                        continue
                    if type(group) is not str or group not in _GROUPS_CHECKED:
                        check_group(f"field 'jobs[{i}].group'", group)  # (raises for a bad one)
                        if len(_GROUPS_CHECKED) >= 4096:
                            _GROUPS_CHECKED.clear()
                        _GROUPS_CHECKED.add(group)
                    jobs.append(new_job(payload, 0, 0, None, None, group))
                    continue
        except orjson.JSONEncodeError:
            dumps_value(raw["payload"], f"jobs[{i}].payload")  # raises, naming the job
        where = f"jobs[{i}]."
        item = object_of(raw, _JOB_FIELDS, f"jobs[{i}]", nested=True)
        if "payload" not in item:
            raise InvalidRequest(f"field '{where}payload' is required")
        jobs.append(new_job(dumps_value(item["payload"], f"jobs[{i}].payload"),
                            *job_options(item, where)))
    return jobs


def parse_request_key(raw: bytes | None) -> str | None:
    """An ``Idempotency-Key`` header's value, checked (1..MAX_REQUEST_KEY_CHARS printable ASCII)."""
    if raw is None:
        return None
    # (deleting every printable byte leaves none: one pass in C, where a generator
    # over the bytes was 5% of a keyed single-job push's Python steps; push-b1 rows
    # of bench/broker_bench.py)
    if not 0 < len(raw) <= MAX_REQUEST_KEY_CHARS or raw.translate(None, _PRINTABLE):
        raise InvalidRequest(f"header Idempotency-Key must be 1..{MAX_REQUEST_KEY_CHARS} "
                             "printable ASCII characters")
    return raw.decode()


def parse_request_floor(raw: bytes | None) -> int | None:
    """An ``Idempotency-Floor`` header's value: the caller's lowest request number
    still awaiting its answer (see :mod:`broker.model.receipts`)."""
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > MAX_FLOOR_DIGITS:
        raise InvalidRequest("header Idempotency-Floor must be a whole number")
    return int(raw)


def parse_push(body: Any) -> list[ops.NewJob | bytes]:
    return parse_new_jobs(object_of(body, _PUSH_FIELDS, "request body"))


# -- staged lines (the format: broker.wire) ------------------------------------------

def parse_stage(body: bytes) -> tuple[str, bytes]:
    """A stage request -> ``(write_id, staged lines)``; the lines are checked by
    :meth:`broker.service.broker.Broker.stage`."""
    first, lines = split_stage_body(body)
    header = object_of(parse_json(first), _STAGE_FIELDS, "the first line of the request body")
    write_id = str_field(header, "write_id", None, max_len=MAX_WRITE_ID_CHARS)
    if write_id is None:
        raise InvalidRequest("field 'write_id' is required")
    return write_id, lines


def parse_publish(body: Any) -> tuple[str, list[str], str | None]:
    body = object_of(body, _PUBLISH_FIELDS, "request body")
    prefix = str_field(body, "prefix", None, max_len=MAX_PREFIX_CHARS)
    if prefix is None:
        raise InvalidRequest("field 'prefix' is required")
    keep = body.get("keep", [])
    if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
        raise InvalidRequest("field 'keep' must be a list of write ids")
    return prefix, keep, str_field(body, "once", None, max_len=MAX_ONCE_CHARS)


def parse_claim(body: Any) -> dict[str, Any]:
    body = object_of(body, _CLAIM_FIELDS, "request body")
    worker = str_field(body, "worker", None, max_len=MAX_WORKER_CHARS)
    if worker is None:
        raise InvalidRequest("field 'worker' is required")
    return {
        "worker": worker,
        "max_jobs": int_field(body, "max_jobs", 1, lo=1, hi=MAX_CLAIM_JOBS),
        "lease_s": number_field(body, "lease_s", DEFAULT_LEASE_S, lo=MIN_LEASE_S, hi=MAX_LEASE_S),
        "wait_s": number_field(body, "wait_s", 0.0, hi=MAX_WAIT_S),
        "wait_for_queue": _flag(body, "wait_for_queue"),
    }


def _flag(body: dict[str, Any], name: str) -> bool:
    """A true/false field (null or missing: false)."""
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"field '{name}' must be true or false")
    return value


def _tokens(values: list[Any], where: str) -> list[str]:
    for i, tok in enumerate(values):
        if not isinstance(tok, str) or not 0 < len(tok) <= MAX_TOKEN_CHARS:
            raise InvalidRequest(f"{where}[{i}] must be a token string")
    return values


def parse_heartbeat(body: Any) -> tuple[list[str], float]:
    body = object_of(body, _HEARTBEAT_FIELDS, "request body")
    tokens = _tokens(list_field(body, "tokens"), "tokens")
    lease = number_field(body, "lease_s", DEFAULT_LEASE_S, lo=MIN_LEASE_S, hi=MAX_LEASE_S)
    return tokens, lease or DEFAULT_LEASE_S


def parse_complete(body: Any) -> ops.CompleteItems:
    """The items of a complete's body, column-wise (see :mod:`broker.model.columns`)."""
    items = ops.CompleteItems()
    tokens, results = items.columns
    dumps = orjson.dumps
    for i, raw in enumerate(list_field(object_of(body, _ITEMS_FIELDS, "request body"),
                                       "items")):
        token = raw.get("token") if type(raw) is dict else None
        if type(token) is not str or not 0 < len(token) <= MAX_TOKEN_CHARS:  # say what is wrong
            _tokens([as_object(raw, f"items[{i}]").get("token")], f"items[{i}].token")
        if not raw.keys() <= _COMPLETE_FIELDS:
            unknown_field(raw, _COMPLETE_FIELDS, f"items[{i}].")
        result = raw.get("result")
        try:
            encoded = None if result is None else dumps(result)
        except orjson.JSONEncodeError:
            encoded = dumps_value(result, f"items[{i}].result")
        if encoded is not None:
            check_depth(encoded, "items[%d].result", i)
        tokens.append(token)
        results.append(encoded)
    return items


def parse_fail(body: Any) -> list[ops.FailItem]:
    items = []
    for i, raw in enumerate(list_field(object_of(body, _ITEMS_FIELDS, "request body"),
                                       "items")):
        item = object_of(raw, _FAIL_FIELDS, f"items[{i}]", nested=True)
        where = f"items[{i}]."
        token = _tokens([item.get("token")], f"items[{i}].token")[0]
        error = item.get("error", "")
        if not isinstance(error, str):
            raise InvalidRequest(f"field '{where}error' must be a string")
        retry = number_field(item, "retry_in_s", None, hi=MAX_DELAY_S, where=where)
        items.append(ops.FailItem(token, error,
                                          None if retry is None else round(retry * 1000)))
    return items


def claimed_to_json(jobs: Sequence[ops.LeasedJob]) -> list[dict[str, Any]]:
    fragment = orjson.Fragment
    times: dict[int, str] = {}  # the jobs of one claim share their expiry
    out: list[dict[str, Any]] = []
    for job_id, payload, token, attempt, expires_ms in plain_rows(jobs):
        expires = times.get(expires_ms)
        if expires is None:
            expires = times[expires_ms] = timefmt.fmt(expires_ms)
        out.append({"id": job_id, "payload": fragment(payload), "token": token,
                    "attempt": attempt, "lease_expires_at": expires})
    for i, group in ops.groups_of(jobs).items():  # (only grouped jobs have the field)
        out[i]["group"] = group
    return out


def items_to_json(items: Sequence[ops.ItemResult]) -> list[dict[str, Any]]:
    out = []
    for token, ok, reason, status in plain_rows(items):
        row: dict[str, Any] = {"token": token, "ok": ok, "reason": reason}
        if status is not None:
            row["status"] = status
        out.append(row)
    return out
