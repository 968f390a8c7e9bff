"""Hypothesis strategies for whole HTTP requests to the broker (the fuzz suite).

:func:`route_requests` aims at one route of :data:`broker.http.routes.ROUTES`:
its method and path with ``{queue}`` filled by a valid or an invalid name, a
bearer token of some kind (the right one, none, a wrong one), random headers,
a content type and a body (:func:`json_bodies`, :func:`staged_lines`).
:func:`stray_requests` calls paths and methods no route serves. Every request
is well-formed HTTP: the broker's answers are under test, not uvicorn's
parser's. A request names its token only by kind
(:data:`AUTH_KINDS`); the harness (:mod:`tests.support.fuzz_harness`) puts
the real one in, so the strategies know no secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlencode

import orjson
from hypothesis import strategies as st

from broker.http.route import JSON_OR_STAGED, STAGED, Route
from broker.http.routes import ROUTES
from broker.wire import STAGED_CONTENT_TYPE
from tests.support.fuzz_values import (
    BY_NAME,
    CONTROL_TEXT,
    JSON_VALUES,
    SCALARS,
    SchemaValues,
    unknown_names,
    weighted,
)

#: The broker under fuzz runs with ``--max-request-mb`` of this.
MAX_REQUEST_MB = 1
OVERSIZE = 1024 * 1024 * MAX_REQUEST_MB + 1

#: Queues made at set-up (seeded with pending, claimed and dead jobs) and paused.
SEEDED = ("fz-a", "fz-b")
#: Valid names no queue has at first (a push or create makes one).
FRESH = ("fz.new_1", "Q" * 128)
VALID_QUEUES = SEEDED + FRESH
#: Invalid names, as the broker should read them.
INVALID_QUEUES = ("", ".", "..", "fz-a\n", "fz-a\r\n", "\nfz-a", "fz-a\t", "fz a", "fz/a",
                  "fz-a/", "-fz", ".fz", "_fz", "fz..a", "fz\x00", "fz%", "fz?a", "fz#a",
                  "ü", "队列", "\x1b[2J")
#: Invalid names by their length alone (an error may quote a short prefix of one only).
LONG_QUEUES = ("Q" * 129, "b" * 4096, "é" * 300)
#: Path segments sent as they are (not percent-encoded): encodings uvicorn decodes
#: ("%66z-a" is "fz-a").
RAW_SEGMENTS = ("%2E%2E", "%2e", "fz-a%0A", "fz-a%00", "fz%2Fa", "%66z-a")

#: How a request carries (or not) the bearer token; the harness fills these in.
AUTH_KINDS = ("valid", "none", "wrong", "token+x", "token-1", "lowercase", "bare", "basic",
              "double-space", "empty")

CONTENT_TYPES = (None, "application/json", "application/json", "text/plain",
                 "application/x-www-form-urlencoded", "application/json; charset=utf-16",
                 STAGED_CONTENT_TYPE, STAGED_CONTENT_TYPE + "; charset=utf-8",
                 STAGED_CONTENT_TYPE + "x", "multipart/form-data; boundary=x", "*/*", "")

IDEMPOTENCY_KEYS = ("r-fz-1", "r-fz-2", "r-fz-99", "k", "x" * 200, "x" * 201, "", "a b",
                    "é", "r-\x80-1")
IDEMPOTENCY_FLOORS = ("0", "1", "3", "-1", "abc", "9" * 18, "9" * 19, "", "1.5", " 1")
STRAY_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD")
STRAY_PATHS = ("/", "/v1", "/v1/", "/v2/queues", "/admin", "/healthz/x", "/metrics/",
               "/v1/queues/fz-a/unknown", "/v1/queues/fz-a/push/extra", "/v1/queues/fz-a/Push",
               "/v1/queues/fz-a/jobs/j0000000001", "/v1/queues/fz-a/../../healthz",
               "/%2e%2e/%2e%2e/etc/passwd", "//", "/v1/queues/fz-a/push/",
               "/v1/queues/", "/v1/queues//stats", "/openapi.yaml", "/docs")

INVALID_JSON = (b"{", b"}", b"[1,]", b"{'a': 1}", b'{"a" 1}', b"nul", b"\xff\xfe{}",
                b'{"a":1}{"b":2}', b"NaN", b"Infinity", b"\x00", b'"\\ud800"',
                b"[" * 100_000, b'{"jobs": [' + b"[" * 3000 + b"]" * 3000 + b"]}", b" ",
                b"\n", b"\xef\xbb\xbf{}")


@dataclass(frozen=True)
class FuzzRequest:
    """One request as sent; ``queue`` is the name the broker should read (None: no
    queue in the path), ``staged``: the broker reads the body as staged lines."""

    method: str
    path: str
    auth: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    route: Route | None
    queue: str | None
    staged: bool = False

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis prints this
        printer.text(repr(self))

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 300 else \
            self.body[:300] + b"...(%d bytes)" % len(self.body)
        path = self.path if len(self.path) <= 200 else self.path[:200] + "..."
        return (f"FuzzRequest({self.method} {path!r} auth={self.auth} "
                f"headers={self.headers!r} body={body!r})")


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


@st.composite
def queue_segments(draw: st.DrawFn) -> tuple[str, str | None]:
    """(path segment, the queue name the broker reads from it)."""
    kind = draw(st.integers(0, 9))
    if kind < 7:
        name = draw(st.sampled_from(VALID_QUEUES))
        return quote(name, safe=""), name
    if kind < 9:
        name = draw(st.sampled_from(INVALID_QUEUES if kind == 7 else LONG_QUEUES))
        return quote(name, safe=""), name
    raw = draw(st.sampled_from(RAW_SEGMENTS))
    return raw, unquote(raw)


@st.composite
def auth_kinds(draw: st.DrawFn) -> str:
    """The right token three times in four, else one of the wrong kinds."""
    return "valid" if draw(st.integers(0, 3)) < 3 else draw(st.sampled_from(AUTH_KINDS[1:]))


@st.composite
def headers(draw: st.DrawFn, content_type: str | None) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    if content_type is not None:
        out.append(("Content-Type", content_type))
    if draw(st.integers(0, 3)) == 3:
        out.append(("Idempotency-Key", draw(st.sampled_from(IDEMPOTENCY_KEYS))))
        if draw(st.booleans()):
            out.append(("Idempotency-Floor", draw(st.sampled_from(IDEMPOTENCY_FLOORS))))
    elif draw(st.integers(0, 9)) == 9:
        out.append(("Idempotency-Floor", draw(st.sampled_from(IDEMPOTENCY_FLOORS))))
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(("X-Fuzz", "Accept", "Accept-Encoding", "X-Forwarded-For",
                                     "Origin", "X-Request-Id", "Cookie", "User-Agent")))
        # what HTTP allows in a field value (no DEL, no controls): malformed HTTP is
        # answered by uvicorn's parser, not by the broker
        value = draw(st.text(st.characters(min_codepoint=32, max_codepoint=255,
                                           exclude_characters="\x7f"), max_size=40))
        out.append((name, value.strip()))
    return tuple(out)


def _staged_line() -> st.SearchStrategy[bytes]:
    options = st.sampled_from([
        b"", b'{"priority":5}', b'{"prioirty":5}', b'{"delay_s":-1}', b'{"delay_s":1e999}',
        b'{"max_attempts":0}', b'{"max_attempts":1}', b'{"key":"k1"}', b'{"key":""}', b"[]",
        b"{", b"null", b'{"priority":1180591620717411303424}', b'{"priority":NaN}',
        b'{"priority":1,"x":2}', b'{"key":"' + b"k" * 513 + b'"}'])
    payloads = st.one_of(
        st.sampled_from([b"1", b'"x"', b'{"a":[1,2]}', b"18446744073709551617", b"NaN", b"{",
                         b"", b"null", b"[" * 201 + b"]" * 201, b'"\\u001b[2J"',
                         b'"' + b"x" * 5000 + b'"', b"\xff", b"1 2"]),
        JSON_VALUES.map(dumps))
    return st.builds(lambda o, sep, p, end: o + sep + p + end, options,
                     st.sampled_from([b"\t", b"\t", b"\t\t", b" ", b""]), payloads,
                     st.sampled_from([b"\n", b"\n", b"\r\n", b""]))


@st.composite
def staged_lines(draw: st.DrawFn, header: bool) -> bytes:
    """A staged body: (for stage) a ``{"write_id"}`` line, then job lines."""
    head = b""
    if header:
        write_ids = [dumps({"write_id": w}) for w in BY_NAME["write_id"]]
        head = draw(st.sampled_from([*write_ids, *write_ids, b'{"write_id":5}', b"{}",
                                     b'{"write_id":"w1","x":1}', b"[]", b"", b"{",
                                     b'{"write_id":null}'])) + b"\n"
    lines = draw(st.lists(_staged_line(), max_size=5))
    junk = draw(st.sampled_from([b"", b"", b"", b"\n", b"\xff\xfe\n", b"\x00\n", b"\t\n"]))
    return head + b"".join(lines) + junk


def json_bodies(route: Route) -> st.SearchStrategy[bytes]:
    """Bodies for a JSON route: from its model mostly, else any JSON, non-JSON, empty,
    or one past the request-size limit."""
    names = list(route.request.model_fields) if route.request is not None else ["x"]
    other = st.one_of(
        st.lists(st.sampled_from(["dead", "pending", "j0000000001", "j0000000005"]),
                 max_size=3).map(dumps),
        SCALARS.map(dumps), JSON_VALUES.map(dumps),
        st.dictionaries(unknown_names(names), SCALARS, min_size=1, max_size=2).map(dumps),
        st.sampled_from(INVALID_JSON), st.just(b""),
        st.sampled_from(CONTROL_TEXT).map(dumps))
    oversize = st.just(b'{"pad":"' + b"x" * OVERSIZE + b'"}')
    if route.request is None:
        return weighted((6, st.just(b"")), (3, other), (1, oversize))
    shaped = SchemaValues(route.request.model_json_schema()).obj().map(dumps)
    return weighted((12, shaped), (3, other), (1, oversize))


@st.composite
def route_requests(draw: st.DrawFn, route: Route) -> FuzzRequest:
    """A request aimed at ``route`` (its own method)."""
    segment, queue = draw(queue_segments()) if "{queue}" in route.path else ("", None)
    path = route.path.replace("{queue}", segment)
    if route.query is not None and draw(st.booleans()):
        query = draw(SchemaValues(route.query.model_json_schema()).obj())
        path += "?" + urlencode({k: v if isinstance(v, str) else dumps(v).decode()
                                 for k, v in query.items()})
    content_type = draw(st.sampled_from(CONTENT_TYPES))
    staged = route.body == STAGED or (route.body == JSON_OR_STAGED and content_type is not None
                                      and content_type.startswith(STAGED_CONTENT_TYPE))
    if staged and draw(st.integers(0, 5)) < 5:
        body = draw(staged_lines(header=route.body == STAGED))
    elif route.method in ("GET", "HEAD") and draw(st.integers(0, 5)) < 5:
        body = b""
    else:
        body = draw(json_bodies(route))
    return FuzzRequest(route.method, path, draw(auth_kinds()),
                       draw(headers(content_type)), body, route, queue, staged)


@st.composite
def stray_requests(draw: st.DrawFn) -> FuzzRequest:
    """A method a path is not served with, a trailing slash, or a path no route has."""
    kind = draw(st.integers(0, 2))
    route = draw(st.sampled_from(ROUTES))
    segment, _ = draw(queue_segments())
    path = route.path.replace("{queue}", segment)
    served = {r.method for r in ROUTES if r.path == route.path}
    if "GET" in served:
        served.add("HEAD")
    if kind == 0 and len(served) < len(STRAY_METHODS):
        method = draw(st.sampled_from([m for m in STRAY_METHODS if m not in served]))
    elif kind == 1:
        method, path = route.method, path + "/"
    else:
        method, path = draw(st.sampled_from(STRAY_METHODS)), draw(st.sampled_from(STRAY_PATHS))
    content_type = draw(st.sampled_from(CONTENT_TYPES))
    body = b"" if method in ("GET", "HEAD") else draw(json_bodies(route))
    return FuzzRequest(method, path, draw(auth_kinds()),
                       draw(headers(content_type)), body, None, None)
