"""Checks shared by every reader of untrusted job input: the HTTP parsers
(:mod:`broker.http.parsers`) and staging (:mod:`broker.service.staging`).

Field checks name the field they refuse (the checks themselves are
:mod:`broker.fields`', which the client runs too); :func:`parse_staged_chunk`
turns staged lines (the format: :mod:`broker.wire`) into jobs. Every problem raises
``InvalidRequest`` (422) or ``PayloadTooLarge`` (413) naming the field or
line; bodies that are not JSON raise ``RequestError`` (400). A message quotes
a bad value or an unknown field's name by its first few characters only
(:func:`broker.errors.shown`). Pure.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, NamedTuple, cast

import orjson

from broker import fields
from broker.errors import InvalidRequest, PayloadTooLarge, shown
from broker.fields import JOB_OPTION_FIELDS, JOB_OPTIONS
from broker.limits import MAX_DEPTH, MAX_ITEMS, MAX_KEY_CHARS
from broker.model import ops
from broker.wire import (
    STAGED_SEP,
    NonFinite,
    bare_staged_payloads,
    check_staged_end,
    dumps,
    parse_json,
    staged_lines,
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


def dumps_value(value: Any, where: str) -> bytes:
    """``value`` (a payload or result, as :func:`broker.wire.parse_json` read it) as
    JSON, its numbers exactly as sent; ``InvalidRequest`` naming ``where`` if it
    cannot be stored (a number beyond a double's range, nesting too deep)."""
    try:
        out = dumps(value)
    except NonFinite as exc:
        raise InvalidRequest(f"{where} cannot be stored: {exc}; JSON numbers are "
                             "finite") from None
    except orjson.JSONEncodeError as exc:
        raise InvalidRequest(f"{where} cannot be stored: {exc} (at most {MAX_DEPTH} levels "
                             "of nesting)") from None
    check_depth(out, where)
    return out


def as_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{where} must be a JSON object")
    return value


def unknown_field(body: dict[str, Any], known: frozenset[str], where: str = "") -> None:
    """Raise ``InvalidRequest`` naming the first field of ``body`` not in ``known``.

    Callers test ``body.keys() <= known`` first (one set comparison, cheap on a
    hot loop) and call this only when it fails."""
    name = next((k for k in body if k not in known), None)
    if name is not None:
        raise InvalidRequest(f"unknown field {shown(where + name)}; known fields are "
                             f"{', '.join(sorted(known))}")


def object_of(value: Any, known: frozenset[str], where: str,
              nested: bool = False) -> dict[str, Any]:
    """``value`` if it is a JSON object with no field outside ``known``; ``where``
    names it in an error (``nested``: fields are named ``where.field``)."""
    body = as_object(value, where)
    if not body.keys() <= known:
        unknown_field(body, known, where + "." if nested else "")
    return body


def list_field(body: dict[str, Any], name: str, max_items: int = MAX_ITEMS) -> list[Any]:
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


def number_field(body: dict[str, Any], name: str, default: float | None, *, lo: float = 0.0,
         hi: float = math.inf, where: str = "") -> float | None:
    """``body[name]`` as a float (``default`` if absent or null), checked by
    :func:`broker.fields.number`."""
    value = body.get(name, default)
    if value is None:
        return default
    return float(fields.number(f"field '{where}{name}'", value, lo, hi))


def int_field(body: dict[str, Any], name: str, default: int | None, *, lo: int, hi: int,
         where: str = "") -> int | None:
    """``body[name]`` (``default`` if absent or null), checked by
    :func:`broker.fields.integer`."""
    value = body.get(name, default)
    if value is None:
        return default
    return fields.integer(f"field '{where}{name}'", value, lo, hi)


def str_field(body: dict[str, Any], name: str, default: str | None, *, max_len: int = MAX_KEY_CHARS,
         where: str = "") -> str | None:
    """``body[name]`` (``default`` if absent or null), checked by
    :func:`broker.fields.text`."""
    value = body.get(name, default)
    if value is None:
        return default
    return fields.text(f"field '{where}{name}'", value, max_len)


def job_options(item: dict[str, Any], where: str,
                ) -> tuple[int, int, int | None, str | None, str | None]:
    """A job's options (priority, delay in ms, max_attempts, key, group), each checked
    as :data:`broker.fields.JOB_OPTIONS` says (absent or null: the default)."""
    delay = _option(item, "delay_s", 0.0, where) or 0.0
    return (_option(item, "priority", 0, where) or 0, round(delay * 1000),
            _option(item, "max_attempts", None, where), _option(item, "key", None, where),
            _option(item, "group", None, where))


def _option(item: dict[str, Any], name: str, default: Any, where: str) -> Any:
    value = item.get(name)
    if value is None:
        return default
    return JOB_OPTIONS[name](f"field '{where}{name}'", value, InvalidRequest)


class StagedChunk(NamedTuple):
    """A staged chunk's jobs (bare payload bytes for default options, as
    :func:`broker.model.ops.push_of` takes them; :class:`~broker.model.ops.NewJob`
    for a job with options), with what a publish needs of its bare payloads
    without another pass over them: whether every job is bare, their bytes in
    all, and the largest (0 for none)."""

    jobs: list[ops.NewJob | bytes]
    all_bare: bool
    bare_bytes: int
    largest: int


def parse_staged(data: bytes, *, check: bool, max_payload_bytes: int = 0,
                 where: str = "staged line") -> list[ops.NewJob | bytes]:
    """The jobs of :func:`parse_staged_chunk`."""
    return parse_staged_chunk(data, check=check, max_payload_bytes=max_payload_bytes,
                              where=where).jobs


def parse_staged_chunk(data: bytes, *, check: bool, max_payload_bytes: int = 0,
                       where: str = "staged line") -> StagedChunk:
    """Staged lines -> their jobs and the sizes of the bare ones.

    With ``check`` (untrusted input) every payload is parsed as JSON and sized
    and every option validated; raises ``InvalidRequest`` or
    ``PayloadTooLarge`` naming the line. Without (lines the broker checked when
    it staged them) only the options are decoded.
    """
    check_staged_end(data, where)
    loads = orjson.loads
    payloads = bare_staged_payloads(data)
    if payloads is not None:
        jobs_ = cast("list[ops.NewJob | bytes]", payloads)  # list is invariant
        largest = max(map(len, payloads))
        # (each line: its payload, a tab and a line break)
        chunk = StagedChunk(jobs_, True, len(data) - 2 * len(payloads), largest)
        if not check:
            return chunk
        try:  # check them all without a Python loop; the loop below names a bad line
            if largest <= min(max_payload_bytes, 2 * MAX_DEPTH):
                deque(map(loads, payloads), maxlen=0)
                return chunk
        except orjson.JSONDecodeError:
            pass
    jobs: list[ops.NewJob | bytes] = []
    bare_bytes = largest = 0
    all_bare = True
    sep = STAGED_SEP
    for i, line in enumerate(staged_lines(data)):
        head, tab, payload = line.partition(sep)
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
            bare_bytes += len(payload)
            largest = max(largest, len(payload))
            continue
        item = as_object(parse_json(head), f"{where} {i} options")
        if not item.keys() <= JOB_OPTION_FIELDS:
            unknown_field(item, JOB_OPTION_FIELDS, f"{where} {i}: ")
        jobs.append(ops.NewJob(payload, *job_options(item, f"{where} {i}: ")))
        all_bare = False
    return StagedChunk(jobs, all_bare, bare_bytes, largest)

