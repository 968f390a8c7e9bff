"""What the client and the broker share on the wire: content types, the
staged-line format, and a per-token answer.

**Staged lines** (content type ``application/vnd.osqueue.staged``), the
compact job format: what a Spark task stages (POST /stage), what a staging
object holds, and an alternative push body. This module is the format's one
home: its definition and constants, its writers (:func:`encode_staged_line`,
:func:`stage_body`) and its reader's rules (:func:`split_stage_body`,
:func:`check_staged_end`, :func:`bare_staged_payloads`, :func:`staged_lines`);
the broker checks what they give and makes jobs of it
(:func:`broker.model.checks.parse_staged_chunk`), and the Spark write's Arrow
path (:mod:`osqueue_spark.datasource.rows`) builds lines from these constants.

One job a line, ``OPTIONS \t PAYLOAD \n`` (:data:`STAGED_SEP`,
:data:`STAGED_END`). OPTIONS is empty for default options, else a compact
JSON object of a job's options (:data:`broker.fields.JOB_OPTION_FIELDS`);
compact JSON holds no raw tab or line break, so a line's first tab ends its
options. PAYLOAD is the job's JSON with no line break in it: JSON allows a raw
line break only between tokens, so a payload holding one is written again
compactly, its numbers exact (:func:`staged_payload`); it may hold a raw tab
(white space). A stage body starts with one JSON line ``{"write_id": ...}``.
Payloads pass through as bytes (checked, never decoded and re-encoded), which
makes this format several times cheaper than a JSON push body.

**Numbers are kept exact.** orjson reads an integer beyond 64 bits, or a decimal
with more digits than a double holds, as the nearest double, and writes that back
(``18446744073709551617`` became ``1.8446744073709552e+19``). :func:`loads` reads
such a number as a Python ``int`` (in full) or an :class:`ExactNumber` (a float
that keeps its text), and :func:`dumps` writes both back as they were sent. A cheap
scan of the bytes (in :func:`loads`) keeps orjson alone on every body without such
a number; the rare body with one is read by the standard library's parser.

A leaf: imports nothing of the broker but its errors.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

import orjson

from broker.errors import InvalidRequest, RequestError

STAGED_CONTENT_TYPE = "application/vnd.osqueue.staged"
#: Between a staged line's options and its payload; after each line.
STAGED_SEP, STAGED_END = b"\t", b"\n"
#: The same, as text (the Spark write builds its lines as text).
STAGED_SEP_TEXT, STAGED_END_TEXT = STAGED_SEP.decode(), STAGED_END.decode()


def parse_json(body: bytes) -> Any:
    """``body`` parsed as JSON with its numbers exact (:func:`loads`);
    ``RequestError`` (400) if it is not JSON."""
    try:
        return loads(body)
    except ValueError as exc:  # orjson.JSONDecodeError is one
        raise RequestError(f"request body is not valid JSON: {exc}") from None


class ExactNumber(float):
    """A JSON number a double does not hold exactly (``0.1000000000000000055511``,
    ``1e400``): a float for comparisons and arithmetic, and the number's ``text``,
    which :func:`dumps` writes back verbatim. It is infinite when the text is beyond
    a double's range: :func:`dumps` refuses it then (``NonFinite``), as JSON has no
    infinity, and every range check refuses an infinite float."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> ExactNumber:
        self = super().__new__(cls, text)
        self.text = text
        return self

    def __repr__(self) -> str:
        return self.text if len(self.text) <= 40 else f"{self.text[:37]}..."

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:
        return (ExactNumber, (self.text,))


class NonFinite(ValueError):
    """A number JSON cannot hold: NaN or an infinity (orjson would write ``null``)."""


#: Digits and dots become "0", e/E "e", signs "-", the rest " ": a number is a
#: run without a space, and one orjson may change has 16 digits or dots in a row
#: (more than 15 significant digits, or an integer past 64 bits). Not looked for:
#: a short number below a double's normal range (``1e-400`` is read as 0.0, as
#: orjson reads it); a scan for their exponents cost half as much again on every
#: text holding UUIDs, for numbers no payload has been seen to carry.
_SHAPES = bytes((0x30 if chr(b) in "0123456789." else 0x65 if chr(b) in "eE"
                 else 0x2D if chr(b) in "-+" else 0x20) for b in range(256))
_LONG_RUN = b"0" * 16
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def loads(data: bytes | str) -> Any:
    """``data`` parsed as JSON (as ``orjson.loads``, whose errors it raises), with
    every number exact: an integer beyond 64 bits is a Python ``int``, a number a
    double would change is an :class:`ExactNumber` (infinite past a double's
    range, such as ``1e400``, which orjson refuses outright).

    Cost: orjson's, plus one ``bytes.translate`` and one ``rfind`` (about a tenth
    of the parse) for a text without a run of 16 digits; with one, also orjson
    writing the value back (a compact text it reproduces holds only numbers
    orjson keeps), else a look at each such run.
    """
    # (a lone surrogate, as undecodable argv bytes become, is then bytes orjson refuses)
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "infinity" not in str(exc):
            raise
        return _loads_slowly(raw)
    shapes = raw.translate(_SHAPES)
    if shapes.rfind(_LONG_RUN) < 0:  # (rfind: several times faster than find here)
        return value
    if orjson.dumps(value) == raw or not _changes(raw, shapes):
        return value
    return _loads_slowly(raw)


def _changes(raw: bytes, shapes: bytes) -> bool:
    """Whether a long digit run of ``raw`` (``shapes`` its :data:`_SHAPES`) is a
    number orjson reads as another number."""
    at = shapes.find(_LONG_RUN)
    while at >= 0:
        start = shapes.rfind(b" ", 0, at) + 1
        end = shapes.find(b" ", at)
        end = len(shapes) if end < 0 else end
        if _changed(raw[start:end]) and _where_a_number_may_be(raw, start, end):
            return True
        at = shapes.find(_LONG_RUN, end)
    return False


def _where_a_number_may_be(raw: bytes, start: int, end: int) -> bool:
    """Whether ``raw[start:end]`` sits where JSON puts a value: after ``:``, ``,``,
    ``[`` or nothing and before ``,``, ``]``, ``}`` or nothing (white space between).
    False for most digit runs inside a string (``"id": "12345678901234567890"``)."""
    i = start - 1
    while i >= 0 and raw[i] in b" \t\r\n":
        i -= 1
    j = end
    while j < len(raw) and raw[j] in b" \t\r\n":
        j += 1
    return (i < 0 or raw[i] in b":,[") and (j == len(raw) or raw[j] in b",]}")


def _changed(token: bytes) -> bool:
    """Whether orjson would read ``token`` as another number (False if it is no
    number: the text of a string)."""
    try:
        if b"." not in token and b"e" not in token and b"E" not in token:
            return not _INT64_MIN <= int(token) <= _UINT64_MAX
        value = float(token)
        if repr(value).encode() == token:  # a double's shortest spelling: kept
            return False
    except ValueError:  # not a number; or an integer past Python's 4,300 digits
        return _NUMBER.fullmatch(token) is not None
    return _NUMBER.fullmatch(token) is not None and _float_changes(token.decode(), value)


def _float_changes(text: str, value: float) -> bool:
    if not math.isfinite(value):
        return True
    shortest = repr(value)
    if shortest == text:
        return False
    try:
        return Decimal(shortest) != Decimal(text)
    except InvalidOperation:
        return True


def _read_int(text: str) -> int | ExactNumber:
    try:
        return int(text)
    except ValueError:  # past Python's 4,300-digit limit: kept as text, refused as infinite
        return ExactNumber(text)


def _read_float(text: str) -> float:
    value = float(text)
    return ExactNumber(text) if _float_changes(text, value) else value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads_slowly(raw: bytes) -> Any:
    """The standard library's parser with exact numbers, refusing what orjson refuses:
    NaN and Infinity, bytes that are not UTF-8, lone surrogates (checked by writing
    the result back), nesting Python cannot follow."""
    try:
        value = json.loads(raw.decode(), parse_int=_read_int, parse_float=_read_float,
                           parse_constant=_no_constant)
        _encode(value, None, infinite_ok=True)  # (an infinity: refused where it is used)
    except (ValueError, TypeError, RecursionError) as exc:
        message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise orjson.JSONDecodeError(message[:200], "", 0) from None
    return value


def compact(data: bytes) -> bytes:
    """``data``'s bytes in an object of their own size, for bytes the broker
    keeps past the request (a job's payload or result in the head, a cache entry).

    ``orjson.dumps`` returns a bytes object whose allocation is its write buffer:
    about 4 KB however short the JSON (64 KB for 5,000 characters), so each one
    kept costs that much (``bench/compact_bench.py``: a pending job with a
    priority held 4,942 B traced, 897 B with this copy). ``b"%b" % data`` copies the
    bytes into an exactly sized object (~50 B for a short value). Costs one copy
    (``len(data)`` bytes): use it where bytes are retained, not on a path that
    formats them into a line at once and drops them. Never fails for bytes."""
    return b"%b" % data


def dumps(value: Any, default: Callable[[Any], Any] | None = None, option: int = 0) -> bytes:
    """``orjson.dumps(value, default=default, option=option)`` with exact numbers: an
    :class:`ExactNumber` is written as its text, an integer beyond 64 bits in full.

    Raises :class:`NonFinite` for an infinite :class:`ExactNumber`, and
    ``orjson.JSONEncodeError`` (a ``TypeError``) for what JSON cannot hold. A
    float NaN or infinity is written as ``null``, as orjson writes it: a caller
    that must refuse them checks with :func:`non_finite` (only needed when the
    output holds ``null``).
    """
    try:
        # no ExactNumber, no big int: orjson alone
        return orjson.dumps(value, default=default, option=option)
    except orjson.JSONEncodeError:
        pass  # (a ``default`` raises TypeError for what it does not know: ExactNumber)
    return _encode(value, default, infinite_ok=False, option=option)


def _encode(value: Any, default: Callable[[Any], Any] | None, *, infinite_ok: bool,
            option: int = 0) -> bytes:
    def exact(item: Any) -> Any:
        if isinstance(item, ExactNumber):
            if not infinite_ok and not math.isfinite(item):
                raise NonFinite(f"the number {item!r} is beyond a double's range")
            return orjson.Fragment(item.text)
        if isinstance(item, _BigInt):
            return orjson.Fragment(str(item))
        if default is None:
            raise TypeError(f"Type is not JSON serializable: {type(item).__name__}")
        return default(item)

    try:
        return orjson.dumps(value, default=exact, option=option)
    except orjson.JSONEncodeError as exc:
        if isinstance(exc.__cause__, NonFinite):
            raise exc.__cause__ from None
        if "64-bit" not in str(exc):
            raise
    try:
        return orjson.dumps(_big_ints_wrapped(value), default=exact,
                            option=option | orjson.OPT_PASSTHROUGH_SUBCLASS)
    except orjson.JSONEncodeError as exc:
        if isinstance(exc.__cause__, NonFinite):
            raise exc.__cause__ from None
        raise


class _BigInt(int):
    """An int beyond 64 bits, made a subclass so orjson hands it to ``default``."""


def _big_ints_wrapped(value: Any) -> Any:
    """A copy of ``value`` with its ints beyond 64 bits as :class:`_BigInt` and its
    other subclasses of str, int, dict and list as the base types (orjson passes
    every subclass to ``default`` when asked to pass these)."""
    if isinstance(value, bool | float) or value is None:
        return value
    if isinstance(value, int):
        return int(value) if _INT64_MIN <= value <= _UINT64_MAX else _BigInt(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {k: _big_ints_wrapped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_big_ints_wrapped(v) for v in value]
    return value


def non_finite(value: Any, where: str = "") -> str | None:
    """Where in ``value`` the first NaN or infinite number is (``where`` then a
    path such as ``.x[3]``), or None if it holds none."""
    if isinstance(value, float):
        return None if math.isfinite(value) else where or "the value"
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = non_finite(item, f"{where}[{i}]")
            if found is not None:
                return found
    return None


# -- staged lines (the format: see the module's docstring) -----------------------------

_STAGED_LINE = b"%s" + STAGED_SEP + b"%s" + STAGED_END


def staged_payload(payload: bytes) -> bytes:
    """``payload`` (a job's JSON) as a staged line holds it: as given, unless it
    holds a line break (JSON allows one only between tokens), then written again
    compactly with its numbers exact. ``RequestError`` if it is not JSON."""
    return dumps(parse_json(payload)) if STAGED_END in payload else payload


def encode_staged_line(payload: bytes, options: dict[str, Any] | None = None) -> bytes:
    """One staged line for a job (``payload``: its JSON bytes, see
    :func:`staged_payload`; ``options``: a job's options, None or empty for the
    defaults)."""
    payload = staged_payload(payload)
    return _STAGED_LINE % (dumps(options) if options else b"", payload)


def stage_body(write_id: str, lines: bytes) -> bytes:
    """The body of a stage request: its header line, then staged ``lines``."""
    return orjson.dumps({"write_id": write_id}) + STAGED_END + lines


def split_stage_body(body: bytes) -> tuple[bytes, bytes]:
    """A stage body's header line (JSON, without its line break) and the staged
    lines after it."""
    header, _, lines = body.partition(STAGED_END)
    return header, lines


def check_staged_end(data: bytes, where: str) -> None:
    """``InvalidRequest`` (naming ``where``, as in ``"line"``) unless staged lines
    ``data`` end with a line break (or are empty). Called before the two below."""
    if data and not data.endswith(STAGED_END):
        raise InvalidRequest(f"{where}s must end with a line break")


def bare_staged_payloads(data: bytes) -> list[bytes] | None:
    """The payloads of staged lines ``data`` if every line has default options,
    else None: one split in C (every line is bare iff the split finds a payload
    per line break, as no payload holds one). Each such line is its payload, a
    tab and a line break."""
    if not data.startswith(STAGED_SEP):
        return None
    payloads = data[1:-1].split(STAGED_END + STAGED_SEP)
    return payloads if len(payloads) == data.count(STAGED_END) else None


def staged_lines(data: bytes) -> list[bytes]:
    """Staged lines ``data`` as lines, each without its line break: a line's
    options end at its first :data:`STAGED_SEP` (``line.partition``), and a line
    without one is not a staged line."""
    lines = data.split(STAGED_END)
    del lines[-1]
    return lines


#: The ``status`` of an answer about a job that was cancelled: a heartbeat,
#: complete or fail of its token (``ok`` false), or a cancel that took.
CANCELLED = "cancelled"
#: The ``status`` of a cancel's answer about a claimed job: marked, it ends
#: cancelled when its worker next calls about it (or its lease runs out).
CANCEL_REQUESTED = "cancel_requested"


class ItemResult(NamedTuple):
    """The answer about one token of a heartbeat, complete or fail: ``ok``, or
    why not (``reason``). Shared by the broker and the client."""

    token: str
    ok: bool
    reason: str | None = None
    # for fail: "pending" (retrying) or "dead"; "cancelled" (ok false): the job
    # was cancelled, the call did nothing and the worker should stop on it
    status: str | None = None


class CancelAnswer(NamedTuple):
    """The answer of a cancel about one job id: ``ok`` with ``status``
    :data:`CANCELLED` (a pending or delayed job, archived as cancelled) or
    :data:`CANCEL_REQUESTED` (a claimed job, marked); or not ``ok``, with
    ``status`` ``finished`` (completed, dead, or gone), ``unknown`` (no such
    job) or ``retry`` (in a segment whose lines were not loaded: again) and
    ``reason`` in words. Shared by the broker and the client."""

    id: str
    ok: bool
    reason: str | None = None
    status: str | None = None
