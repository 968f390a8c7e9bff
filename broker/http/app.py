"""The HTTP API (docs/operations.md): serves the routes table of :mod:`broker.http.routes`.

Errors are ``{"error": message, "code": stable_code}`` with the status of the
error class (see :mod:`broker.errors`). Batch calls (heartbeat, complete,
fail) answer 200 when every token was accepted and 409 ``stale_token`` when
any was refused; both carry the per-token ``results``.

Push, claim, purge and redrive take an ``Idempotency-Key`` header (1-200 printable ASCII
characters): a repeat of the call with the same key, while the queue keeps
its receipt (the ``retry_ttl_s`` setting), answers what the first call
answered (the same ids; the same jobs) and changes nothing. A key of the form
``r-{client}-{n}`` may come with ``Idempotency-Floor: m``: that client's calls
numbered below ``m`` have their answers, so their receipts are dropped.

The hot calls (push, claim, heartbeat, complete, fail, stage, publish) are
served by :meth:`App.serve_hot`, a bare ASGI path without Starlette's router
and middleware stack (about a third of a request's cost,
``bench/broker_bench.py``); the rest go through the router, which validates
their bodies with the route's model (:mod:`broker.http.schemas`). Every body,
on every route, is read within ``max_request_bytes`` (413 past it).

Every other request passes :class:`broker.http.gate.Gate` first (403
``forbidden``: a host name a broker without a token does not answer to, or a
request a browser sent for another site's page), and a state-changing one
(not GET or HEAD) must carry its route's content type, ``application/json`` or
the staged lines' (415 ``unsupported_media_type``): no web page can send
either without a CORS preflight, which the broker never answers. Both come
before the token's check (the content type's, after it) and the body.

Paths under ``/ui/`` are the web dashboard (:mod:`broker.http.ui`), served by
its own router after the hot path's check. Every other answer is JSON: an
unknown path is 404 ``not_found`` (a trailing ``/`` too: no redirects), a
known path with another method is 405 ``method_not_allowed`` with an
``Allow`` header. A refused token is logged at warning (method, path,
client address; never the header), the refusals of the next minute summed up
in one line; wrong tokens are throttled per client address, 429 with
``Retry-After`` (:mod:`broker.http.throttle`).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import orjson
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute

from broker.errors import (
    Forbidden,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    OsqueueError,
    PayloadTooLarge,
    RequestError,
    Unauthorized,
    UnsupportedMediaType,
    shown,
)
from broker.gcpause import gc_paused_for
from broker.http import parsers
from broker.http.gate import Gate
from broker.http.route import JSON, JSON_OR_STAGED, STAGED, HotHandler, RestHandler, Route
from broker.http.routes import ROUTES
from broker.http.schemas import problem
from broker.http.throttle import Guard
from broker.http.ui import Ui, build_ui
from broker.service.broker import Broker
from broker.service.history import History
from broker.wire import STAGED_CONTENT_TYPE, parse_json

log = logging.getLogger("osqueue.http")

HOT_PREFIX = "/v1/queues/"
_HOT_SUFFIX = "/v1/queues/{queue}/"
_STAGED_TYPE = STAGED_CONTENT_TYPE.encode()
_INTERNAL = {"error": "internal error", "code": "internal"}
#: Refusals answered before the body was read (all of it): the connection is
#: closed after the answer, so the rest of the body is not received for nothing.
_UNREAD = frozenset({401, 413, 429})
_CLOSE = (b"connection", b"close")


def retry_after(out: Any) -> bytes | None:
    """The ``Retry-After`` value of an error body that names one (429), else None."""
    wait = out.get("retry_after_s") if isinstance(out, dict) else None
    return None if wait is None else str(wait).encode()


def _json(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def _http_error(request: Request, exc: Exception) -> Response:
    """The router's own refusals (no such path, wrong method) as JSON errors."""
    assert isinstance(exc, HTTPException)
    error: OsqueueError
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        error = MethodNotAllowed(f"{request.method} is not allowed here; use {allowed}")
    else:
        error = NotFound(f"no route {request.method} {shown(request.url.path)}; "
                         "see /openapi.json")
    return _json(error.to_dict(), error.status, exc.headers)


#: The gate's refusals and a wrong content type are answered before the body too.
_UNREAD = _UNREAD | {Forbidden.status, UnsupportedMediaType.status}
#: A body's kind by its content type (as clients send it, else by its media type).
_KINDS = {b"application/json": JSON, _STAGED_TYPE: STAGED}
_TYPE_NAMES = {JSON: "application/json", STAGED: STAGED_CONTENT_TYPE,
               JSON_OR_STAGED: f"application/json or {STAGED_CONTENT_TYPE}"}
_READS = frozenset({"GET", "HEAD"})


def body_kind(content_type: bytes | None) -> str | None:
    """``JSON`` or ``STAGED`` by a ``Content-Type`` value (its media type, any case,
    parameters such as ``charset`` aside), or None for another type or none."""
    if content_type is None:
        return None
    kind = _KINDS.get(content_type)
    if kind is None:
        kind = _KINDS.get(content_type.partition(b";")[0].strip().lower())
    return kind


def validated(model: type[BaseModel], raw: bytes) -> BaseModel:
    """``raw`` (JSON; empty means ``{}``) as ``model`` takes it; ``RequestError``
    (400) if it is not JSON, ``InvalidRequest`` (422) naming the field if the
    model refuses it."""
    try:
        return model.model_validate(parse_json(raw) if raw.strip() else {})
    except ValidationError as exc:
        raise InvalidRequest(problem(exc)) from None


class App:
    """The ASGI app serving ``broker``: the hot routes directly, the rest through a router.

    ``token``: require ``Authorization: Bearer <token>`` on every route marked
    ``auth`` (it is kept as the expected header only, never logged or shown).
    Without one, only a loopback ``Host`` or the broker's advertised one is
    answered (:class:`broker.http.gate.Gate`).
    """

    def __init__(self, broker: Broker, *, token: str | None = None,
                 routes: tuple[Route, ...] = ROUTES, ui: Ui | None = None,
                 guard: Guard | None = None) -> None:
        self.broker = broker
        self.ui = ui
        self.guard = guard or Guard(broker.config.wrong_tokens_per_min, advertise_url=broker.url)
        self._expected = f"Bearer {token}".encode() if token else None
        self._limit = broker.config.max_request_bytes
        self.gate = Gate(broker.url, any_host=token is not None)
        self.hot: dict[str, Route] = {
            r.path.removeprefix(_HOT_SUFFIX): r for r in routes if r.hot}
        if any(r.method != "POST" or not r.path.startswith(_HOT_SUFFIX)
               for r in self.hot.values()):
            raise ValueError("hot routes are POST /v1/queues/{queue}/<action>")
        by_path: dict[str, list[Route]] = {}
        for r in routes:
            by_path.setdefault(r.path, []).append(r)
        # the hot routes too: a hot path with another method is 405, not 404
        self.rest = Starlette(routes=[
            StarletteRoute(path, self._endpoint(same), methods=[r.method for r in same])
            for path, same in by_path.items()], exception_handlers={HTTPException: _http_error})
        self.rest.router.redirect_slashes = False  # "/healthz/" is a 404, not a 307

    def __repr__(self) -> str:
        return f"App({self.broker.id!r}, auth={self._expected is not None})"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and \
                scope["path"].startswith(HOT_PREFIX):
            queue, _, action = scope["path"][len(HOT_PREFIX):].partition("/")
            route = self.hot.get(action)
            if route is not None and queue:
                status, out = await self.serve_hot(route, queue, scope, receive)
                body = orjson.dumps(out)
                headers = [(b"content-type", b"application/json"),
                           (b"content-length", str(len(body)).encode())]
                if status in _UNREAD:
                    headers.append(_CLOSE)
                    if (wait := retry_after(out)) is not None:
                        headers.append((b"retry-after", wait))
                await send({"type": "http.response.start", "status": status,
                            "headers": headers})
                await send({"type": "http.response.body", "body": body})
                if route.lost is not None:  # (e.g. a claim's jobs, if the answer was lost)
                    await route.lost(self.broker, queue, status, out, scope)
                return
        if self.ui is not None and scope["type"] == "http" and (
                scope["path"] == "/ui" or scope["path"].startswith("/ui/")):
            await self.ui(scope, receive, send)  # the dashboard: broker.http.ui
            return
        await self.rest(scope, receive, send)

    def authorize(self, scope: Any, header: bytes | None, *, required: bool = True,
                  host: bytes | None = None) -> bool:
        """Whether ``header`` (``Authorization``'s value) is the expected bearer
        token, or no token is required. A header from a throttled address raises
        ``TooManyRequests`` before it is looked at; a missing or wrong one is
        logged (never the header) and raises ``Unauthorized`` if ``required``; a
        wrong one counts against its address, under the request's ``host``
        (:mod:`broker.http.throttle`), which the right one vouches for."""
        if self._expected is None:
            return True
        if header is not None:
            if self.guard.throttle.blocked:
                self.guard.check(scope.get("client"), host)
            if hmac.compare_digest(header, self._expected):
                if host not in self.guard.vouched:
                    self.guard.vouch(host)
                return True
        if header is not None or required:
            self.refuse(scope, wrong=header is not None, required=required, host=host)
        return False

    def refuse(self, scope: Any, *, wrong: bool, required: bool = True,
               host: bytes | None = None) -> None:
        """Log a refused token (summed up; never the header); a ``wrong`` one counts
        against its address (under ``host``). Raises ``Unauthorized`` if ``required``."""
        client = scope.get("client")
        self.guard.refused(client, f"refused {scope['method']} {shown(scope['path'])} from "
                                   f"{f'{client[0]}:{client[1]}' if client else '?'}: missing "
                                   "or wrong bearer token", wrong=wrong, host=host)
        if required:
            raise Unauthorized("missing or wrong bearer token")

    # -- the hot path ----------------------------------------------------------------

    def check_length(self, headers: dict[bytes, bytes]) -> None:
        """``PayloadTooLarge`` if the declared ``Content-Length`` is past ``max_request_bytes``."""
        length = headers.get(b"content-length", b"")
        if length.isdigit() and (len(length) > 18 or int(length) > self._limit):
            raise PayloadTooLarge(f"request body is {length[:20].decode()} bytes; the limit "
                                  f"is {self._limit}")

    def check_type(self, route: Route, headers: dict[bytes, bytes]) -> str:
        """The kind of body (``JSON`` or ``STAGED``) a state-changing call of
        ``route`` carries by its content type; ``UnsupportedMediaType`` if the
        route does not take that type, or there is none."""
        sent = headers.get(b"content-type")
        # (first as clients send it: one lookup, no call; bench/broker_bench.py, push rows)
        kind = _KINDS.get(sent or b"") or body_kind(sent)
        if kind is None or (kind != route.body and route.body != JSON_OR_STAGED):
            raise UnsupportedMediaType(
                f"{route.method} {route.path} needs Content-Type: {_TYPE_NAMES[route.body]}; "
                f"got {'none' if sent is None else shown(sent.decode('latin-1'))}")
        return kind

    async def read_body(self, headers: dict[bytes, bytes], receive: Any) -> bytes:
        """The request body: its declared length checked first, then its bytes
        counted as they arrive; ``PayloadTooLarge`` past ``max_request_bytes``,
        ``RequestError`` if the client goes away first."""
        limit = self._limit
        self.check_length(headers)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise RequestError("the client went away before sending its body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def serve_hot(self, route: Route, queue: str,
                        scope: Any, receive: Any) -> tuple[int, Any]:
        """Answer one hot call: ``(status, JSON-able body)``; never raises."""
        try:
            headers = dict(scope["headers"])
            self.gate.check(scope, headers)
            if route.auth:
                self.authorize(scope, headers.get(b"authorization"), host=headers.get(b"host"))
            request = (parsers.parse_request_key(headers.get(b"idempotency-key")),
                       parsers.parse_request_floor(headers.get(b"idempotency-floor")))
            raw = self.check_type(route, headers) == STAGED
            body: Any = await self.read_body(headers, receive)
            if not raw:  # a large body is thousands of small objects, none in a cycle
                with gc_paused_for(len(body) // 64):
                    body = parse_json(body)
            handler = cast(HotHandler, route.handler)
            return await handler(self.broker, queue, body, request, receive)
        except OsqueueError as exc:
            return exc.status, exc.to_dict()
        except Exception:  # never crash the broker on one request
            log.exception("unexpected error serving POST %s", scope["path"])
            return 500, _INTERNAL

    # -- the rest --------------------------------------------------------------------

    def _endpoint(self, routes: list[Route]) -> Callable[[Request], Awaitable[Response]]:
        by_method = {r.method: r for r in routes}
        if "GET" in by_method:  # the router answers HEAD with the GET route
            by_method.setdefault("HEAD", by_method["GET"])

        async def endpoint(request: Request) -> Response:  # a function: Starlette's router
            return await self._serve_rest(by_method[request.method], request)  # calls it

        return endpoint

    async def _serve_rest(self, route: Route, request: Request) -> Response:
        if route.hot:  # reached through the router (the fast path missed it): same answer
            status, out = await self.serve_hot(route, request.path_params["queue"],
                                               request.scope, request.receive)
            return _json(out, status)
        try:
            headers = dict(request.scope["headers"])
            self.gate.check(request.scope, headers)
            authorized = self.authorize(request.scope, headers.get(b"authorization"),
                                        required=route.auth, host=headers.get(b"host"))
            request.state.authorized = authorized
            body = None
            if request.method not in _READS:
                self.check_type(route, headers)
            if route.request is not None:
                body = validated(route.request, await self.read_body(headers, request.receive))
            else:  # not read, but a declared size past the limit is still refused
                self.check_length(headers)
            fn = cast(RestHandler, route.handler)
            out = await fn(self.broker, request, body)
            return out if isinstance(out, Response) else _json(out)
        except OsqueueError as exc:
            out = exc.to_dict()
            wait = retry_after(out)
            return _json(out, exc.status, None if exc.status not in _UNREAD else
                         {"connection": "close"} if wait is None else
                         {"connection": "close", "retry-after": wait.decode()})
        except Exception:  # never crash the broker on one request
            log.exception("unexpected error serving %s %s", request.method, request.url.path)
            return _json(_INTERNAL, 500)


def build_app(broker: Broker, *, token: str | None = None,
              history: History | None = None) -> App:
    """The ASGI app serving ``broker``, its dashboard at ``/ui/`` included (read-only
    if ``broker.config.ui_read_only``). ``token``: require ``Authorization:
    Bearer`` (the dashboard: a login with it). ``history``: what the dashboard's
    charts draw (default: a new one, sampled only if someone runs it)."""
    if history is None:
        history = History(broker, interval_s=broker.config.history_interval_s)
    # one budget for the API and the dashboard
    guard = Guard(broker.config.wrong_tokens_per_min, advertise_url=broker.url)
    ui = build_ui(broker, history, token=token, read_only=broker.config.ui_read_only,
                  guard=guard)
    return App(broker, token=token, ui=ui, guard=guard)
