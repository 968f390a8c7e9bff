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
``bench/broker_bench.py``); the rest go through the router.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute

from broker.errors import OsqueueError, PayloadTooLarge, RequestError, Unauthorized
from broker.gcpause import gc_paused_for
from broker.http import parsers
from broker.http.route import JSON_OR_STAGED, STAGED, HotHandler, RestHandler, Route
from broker.http.routes import ROUTES
from broker.service.coordinator import Broker
from broker.wire import STAGED_CONTENT_TYPE, parse_json

log = logging.getLogger("osqueue.http")

HOT_PREFIX = "/v1/queues/"
_HOT_SUFFIX = "/v1/queues/{queue}/"
_STAGED_TYPE = STAGED_CONTENT_TYPE.encode()
_INTERNAL = {"error": "internal error", "code": "internal"}


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


class App:
    """The ASGI app serving ``broker``: the hot routes directly, the rest through a router.

    ``token``: require ``Authorization: Bearer <token>`` on every route marked
    ``auth`` (it is kept as the expected header only, never logged or shown).
    """

    def __init__(self, broker: Broker, *, token: str | None = None,
                 routes: tuple[Route, ...] = ROUTES) -> None:
        self.broker = broker
        self._expected = f"Bearer {token}".encode() if token else None
        self._limit = broker.config.max_request_bytes
        self.hot: dict[str, Route] = {
            r.path.removeprefix(_HOT_SUFFIX): r for r in routes if r.hot}
        if any(r.method != "POST" or not r.path.startswith(_HOT_SUFFIX)
               for r in self.hot.values()):
            raise ValueError("hot routes are POST /v1/queues/{queue}/<action>")
        by_path: dict[str, list[Route]] = {}
        for r in routes:
            if not r.hot:
                by_path.setdefault(r.path, []).append(r)
        self.rest = Starlette(routes=[
            StarletteRoute(path, self._endpoint(same), methods=[r.method for r in same])
            for path, same in by_path.items()])

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
                await send({"type": "http.response.start", "status": status, "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.rest(scope, receive, send)

    def check_auth(self, header: bytes) -> None:
        """Raise ``Unauthorized`` unless ``header`` is the expected bearer token."""
        if self._expected is not None and not hmac.compare_digest(header, self._expected):
            raise Unauthorized("missing or wrong bearer token")

    # -- the hot path ----------------------------------------------------------------

    async def read_body(self, headers: dict[bytes, bytes], receive: Any) -> bytes:
        """The request body; ``PayloadTooLarge`` past ``max_request_bytes``,
        ``RequestError`` if the client goes away first."""
        limit = self._limit
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > limit:
            raise PayloadTooLarge(f"request body is {int(length)} bytes; the limit is {limit}")
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
            if route.auth:
                self.check_auth(headers.get(b"authorization", b""))
            request = (parsers.parse_request_key(headers.get(b"idempotency-key")),
                       parsers.parse_request_floor(headers.get(b"idempotency-floor")))
            body: Any = await self.read_body(headers, receive)
            raw = route.body == STAGED or (route.body == JSON_OR_STAGED and headers.get(
                b"content-type", b"").startswith(_STAGED_TYPE))
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
        handlers = {r.method: (r.handler, r.auth) for r in routes}
        if "GET" in handlers:  # the router answers HEAD with the GET route
            handlers.setdefault("HEAD", handlers["GET"])

        async def endpoint(request: Request) -> Response:  # a function: Starlette's router
            return await self._serve_rest(handlers, request)  # calls it with the request

        return endpoint

    async def _serve_rest(self, handlers: dict[str, tuple[Any, bool]],
                          request: Request) -> Response:
        fn: RestHandler
        fn, auth = handlers[request.method]
        try:
            if auth:
                self.check_auth(request.headers.get("authorization", "").encode())
            out = await fn(self.broker, request)
            return out if isinstance(out, Response) else _json(out)
        except OsqueueError as exc:
            return _json(exc.to_dict(), exc.status)
        except Exception:  # never crash the broker on one request
            log.exception("unexpected error serving %s %s", request.method, request.url.path)
            return _json(_INTERNAL, 500)


def build_app(broker: Broker, *, token: str | None = None) -> App:
    """The ASGI app serving ``broker``. ``token``: require ``Authorization: Bearer``."""
    return App(broker, token=token)
