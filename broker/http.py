"""The HTTP API (SPEC section 5): a thin Starlette adapter over :class:`Broker`.

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
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker import api
from broker.errors import (
    InvalidRequest,
    OsqueueError,
    PayloadTooLarge,
    RequestError,
    StaleToken,
    Unauthorized,
)
from broker.gcpause import gc_paused_for
from broker.openapi import OPENAPI
from broker.service import Broker

log = logging.getLogger("osqueue.http")

Handler = Callable[[Request], Awaitable[Response]]
RequestKey = tuple["str | None", "int | None"]  # (Idempotency-Key, Idempotency-Floor)
HotHandler = Callable[[str, Any, RequestKey], Awaitable[tuple[int, Any]]]


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


def _error(exc: OsqueueError) -> Response:
    return _json(exc.to_dict(), exc.status)


def build_app(broker: Broker, *, token: str | None = None) -> Any:
    """The ASGI app serving ``broker``. ``token``: require ``Authorization: Bearer``."""
    expected = f"Bearer {token}".encode() if token else None
    limit = broker.config.max_request_bytes
    staged_type = api.STAGED_CONTENT_TYPE.encode()

    def check_auth(header: bytes) -> None:
        if expected is not None and not hmac.compare_digest(header, expected):
            raise Unauthorized("missing or wrong bearer token")

    def endpoint(fn: Callable[[Request], Awaitable[Any]], *, auth: bool = True) -> Handler:
        async def handle(request: Request) -> Response:
            try:
                if auth:
                    check_auth(request.headers.get("authorization", "").encode())
                out = await fn(request)
                return out if isinstance(out, Response) else _json(out)
            except OsqueueError as exc:
                return _error(exc)
            except Exception:  # never crash the broker on one request
                log.exception("unexpected error serving %s %s", request.method, request.url.path)
                return _json({"error": "internal error", "code": "internal"}, 500)

        return handle

    # -- the hot calls: served by a bare ASGI handler, without the router and
    # middleware stack (about a third of a request's cost) -------------------------

    def batch_answer(results: list[Any]) -> tuple[int, Any]:
        with gc_paused_for(len(results)):
            body = {"results": api.items_to_json(results)}
        if all(r.ok for r in results):
            return 200, body
        stale = StaleToken("one or more tokens are stale (see results)")
        return stale.status, {**stale.to_dict(), **body}

    async def push(queue: str, body: Any, request: RequestKey) -> tuple[int, Any]:
        if isinstance(body, bytes):  # staged lines
            jobs = api.parse_staged(body, check=True, max_payload_bytes=limit, where="line")
        else:
            jobs = api.parse_push(body)
        return 200, {"ids": await broker.push(queue, jobs, *request)}

    async def claim(queue: str, body: Any, request: RequestKey) -> tuple[int, Any]:
        key, floor = request
        jobs = await broker.claim(queue, **api.parse_claim(body), request=key, floor=floor)
        with gc_paused_for(len(jobs)):
            return 200, {"jobs": api.claimed_to_json(jobs)}

    async def heartbeat(queue: str, body: Any, request: RequestKey) -> tuple[int, Any]:
        tokens, lease_s = api.parse_heartbeat(body)
        return batch_answer(await broker.heartbeat(queue, tokens, lease_s))

    async def complete(queue: str, body: Any, request: RequestKey) -> tuple[int, Any]:
        listed = body.get("items") if isinstance(body, dict) else None
        with gc_paused_for(len(listed) if isinstance(listed, list) else 0):
            items = api.parse_complete(body)
        return batch_answer(await broker.complete(queue, items))

    async def fail(queue: str, body: Any, request: RequestKey) -> tuple[int, Any]:
        return batch_answer(await broker.fail(queue, api.parse_fail(body)))

    async def stage(queue: str, body: bytes, request: RequestKey) -> tuple[int, Any]:
        write_id, lines = api.parse_stage(body)
        return 200, {"staged": await broker.stage(queue, write_id, lines)}

    async def publish(queue: str, body: Any, request: RequestKey) -> tuple[int, Any]:
        prefix, keep, once = api.parse_publish(body)
        return 200, await broker.publish(queue, prefix, keep, once)

    hot: dict[str, HotHandler] = {
        "push": push, "claim": claim, "heartbeat": heartbeat, "complete": complete,
        "fail": fail, "stage": stage, "publish": publish,
    }

    async def read_body(headers: dict[bytes, bytes], receive: Any) -> bytes:
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

    async def serve_hot(handler: HotHandler, queue: str,
                        scope: Any, receive: Any) -> tuple[int, Any]:
        try:
            headers = dict(scope["headers"])
            check_auth(headers.get(b"authorization", b""))
            request = (api.parse_request_key(headers.get(b"idempotency-key")),
                       api.parse_request_floor(headers.get(b"idempotency-floor")))
            body = await read_body(headers, receive)
            raw = handler is stage or (handler is push and headers.get(
                b"content-type", b"").startswith(staged_type))
            if not raw:  # a large body is thousands of small objects, none in a cycle
                with gc_paused_for(len(body) // 64):
                    body = api.parse_json(body)
            return await handler(queue, body, request)
        except OsqueueError as exc:
            return exc.status, exc.to_dict()
        except Exception:  # never crash the broker on one request
            log.exception("unexpected error serving POST %s", scope["path"])
            return 500, {"error": "internal error", "code": "internal"}

    async def stats(request: Request) -> Any:
        return await broker.stats(request.path_params["queue"])

    async def jobs(request: Request) -> Any:
        q = request.query_params
        try:
            limit = int(q.get("limit", "100"))
        except ValueError:
            raise InvalidRequest("limit must be an integer") from None
        page = await broker.jobs(request.path_params["queue"], q.get("status") or None,
                                 limit, q.get("after") or None, raw=True)
        return {"jobs": page, "next_after": page[-1]["id"] if len(page) == limit else None}

    async def create(request: Request) -> Any:
        raw = await request.body()
        body = api.parse_json(raw) if raw.strip() else {}
        settings = body.get("settings", {}) if isinstance(body, dict) else None
        if not isinstance(settings, dict):
            raise InvalidRequest("field 'settings' must be an object")
        return await broker.create_queue(request.path_params["queue"], settings)

    def request_key(request: Request) -> RequestKey:
        headers = request.headers
        key, floor = headers.get("idempotency-key"), headers.get("idempotency-floor")
        return (api.parse_request_key(None if key is None else key.encode()),
                api.parse_request_floor(None if floor is None else floor.encode()))

    async def redrive(request: Request) -> Any:
        raw = await request.body()
        body = api.parse_json(raw) if raw.strip() else {}
        ids = body.get("ids") if isinstance(body, dict) else None
        if ids is not None and (not isinstance(ids, list) or
                                not all(isinstance(i, str) for i in ids)):
            raise InvalidRequest("field 'ids' must be a list of job ids or null")
        return {"redriven": await broker.redrive(request.path_params["queue"], ids,
                                                 *request_key(request))}

    async def purge(request: Request) -> Any:
        raw = await request.body()
        body = api.parse_json(raw) if raw.strip() else {}
        statuses = body.get("statuses") if isinstance(body, dict) else None
        if statuses is not None and (not isinstance(statuses, list) or
                                     not all(isinstance(s, str) for s in statuses)):
            raise InvalidRequest("field 'statuses' must be a list of statuses")
        return {"purged": await broker.purge(request.path_params["queue"], statuses,
                                             *request_key(request))}

    async def pause(request: Request) -> Any:
        await broker.set_paused(request.path_params["queue"], True)
        return {"paused": True}

    async def resume(request: Request) -> Any:
        await broker.set_paused(request.path_params["queue"], False)
        return {"paused": False}

    async def queues(request: Request) -> Any:
        return {"queues": broker.queue_names()}

    async def healthz(request: Request) -> Any:
        return broker.health()

    async def metrics(request: Request) -> Any:
        broker.refresh_gauges()
        return Response(broker.metrics.render(), media_type="text/plain; version=0.0.4")

    async def openapi(request: Request) -> Any:
        return OPENAPI

    q = "/v1/queues/{queue}"
    routes = [
        Route(f"{q}/stats", endpoint(stats), methods=["GET"]),
        Route(f"{q}/jobs", endpoint(jobs), methods=["GET"]),
        Route(f"{q}/redrive", endpoint(redrive), methods=["POST"]),
        Route(f"{q}/purge", endpoint(purge), methods=["POST"]),
        Route(f"{q}/pause", endpoint(pause), methods=["POST"]),
        Route(f"{q}/resume", endpoint(resume), methods=["POST"]),
        Route(q, endpoint(create), methods=["PUT", "POST"]),
        Route("/v1/queues", endpoint(queues), methods=["GET"]),
        Route("/healthz", endpoint(healthz, auth=False), methods=["GET"]),
        Route("/metrics", endpoint(metrics), methods=["GET"]),
        Route("/openapi.json", endpoint(openapi, auth=False), methods=["GET"]),
    ]
    rest = Starlette(routes=routes)
    prefix = "/v1/queues/"

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and \
                scope["path"].startswith(prefix):
            queue, _, action = scope["path"][len(prefix):].partition("/")
            handler = hot.get(action)
            if handler is not None and queue:
                status, out = await serve_hot(handler, queue, scope, receive)
                body = orjson.dumps(out)
                await send({"type": "http.response.start", "status": status, "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await rest(scope, receive, send)

    return app
