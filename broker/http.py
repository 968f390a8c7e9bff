"""The HTTP API (SPEC section 5): a thin Starlette adapter over :class:`Broker`.

Errors are ``{"error": message, "code": stable_code}`` with the status of the
error class (see :mod:`broker.errors`). Batch calls (heartbeat, complete,
fail) answer 200 when every token was accepted and 409 ``stale_token`` when
any was refused; both carry the per-token ``results``.
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
    StaleToken,
    Unauthorized,
)
from broker.openapi import OPENAPI
from broker.service import Broker

log = logging.getLogger("osqueue.http")

Handler = Callable[[Request], Awaitable[Response]]


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


def _error(exc: OsqueueError) -> Response:
    return _json(exc.to_dict(), exc.status)


def build_app(broker: Broker, *, token: str | None = None) -> Starlette:
    """The ASGI app serving ``broker``. ``token``: require ``Authorization: Bearer``."""
    expected = f"Bearer {token}".encode() if token else None
    limit = broker.config.max_request_bytes

    async def body_of(request: Request) -> Any:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise PayloadTooLarge(f"request body is {length} bytes; the limit is {limit}")
        if length is not None and length.isdigit():  # bounded above: read it whole
            return api.parse_json(await request.body())
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
        return api.parse_json(b"".join(chunks))

    def endpoint(fn: Callable[[Request], Awaitable[Any]], *, auth: bool = True) -> Handler:
        async def handle(request: Request) -> Response:
            try:
                if auth and expected is not None:
                    got = request.headers.get("authorization", "").encode()
                    if not hmac.compare_digest(got, expected):
                        raise Unauthorized("missing or wrong bearer token")
                out = await fn(request)
                return out if isinstance(out, Response) else _json(out)
            except OsqueueError as exc:
                return _error(exc)
            except Exception:  # never crash the broker on one request
                log.exception("unexpected error serving %s %s", request.method, request.url.path)
                return _json({"error": "internal error", "code": "internal"}, 500)

        return handle

    def batch_answer(results: list[Any]) -> Response:
        body = {"results": api.items_to_json(results)}
        if all(r.ok for r in results):
            return _json(body)
        stale = StaleToken("one or more tokens are stale (see results)")
        return _json({**stale.to_dict(), **body}, stale.status)

    async def push(request: Request) -> Any:
        jobs = api.parse_push(await body_of(request))
        return {"ids": await broker.push(request.path_params["queue"], jobs)}

    async def claim(request: Request) -> Any:
        args = api.parse_claim(await body_of(request))
        jobs = await broker.claim(request.path_params["queue"], **args)
        return {"jobs": api.claimed_to_json(jobs)}

    async def heartbeat(request: Request) -> Any:
        tokens, lease_s = api.parse_heartbeat(await body_of(request))
        return batch_answer(await broker.heartbeat(request.path_params["queue"], tokens, lease_s))

    async def complete(request: Request) -> Any:
        items = api.parse_complete(await body_of(request))
        return batch_answer(await broker.complete(request.path_params["queue"], items))

    async def fail(request: Request) -> Any:
        items = api.parse_fail(await body_of(request))
        return batch_answer(await broker.fail(request.path_params["queue"], items))

    async def stage(request: Request) -> Any:
        write_id, jobs = api.parse_stage(await body_of(request))
        return {"staged": await broker.stage(request.path_params["queue"], write_id, jobs)}

    async def publish(request: Request) -> Any:
        prefix, keep, once = api.parse_publish(await body_of(request))
        return await broker.publish(request.path_params["queue"], prefix, keep, once)

    async def stats(request: Request) -> Any:
        return await broker.stats(request.path_params["queue"])

    async def jobs(request: Request) -> Any:
        q = request.query_params
        try:
            limit = int(q.get("limit", "100"))
        except ValueError:
            raise InvalidRequest("limit must be an integer") from None
        page = await broker.jobs(request.path_params["queue"], q.get("status") or None,
                                 limit, q.get("after") or None)
        return {"jobs": page, "next_after": page[-1]["id"] if len(page) == limit else None}

    async def create(request: Request) -> Any:
        raw = await request.body()
        body = api.parse_json(raw) if raw.strip() else {}
        settings = body.get("settings", {}) if isinstance(body, dict) else None
        if not isinstance(settings, dict):
            raise InvalidRequest("field 'settings' must be an object")
        return await broker.create_queue(request.path_params["queue"], settings)

    async def redrive(request: Request) -> Any:
        raw = await request.body()
        body = api.parse_json(raw) if raw.strip() else {}
        ids = body.get("ids") if isinstance(body, dict) else None
        if ids is not None and (not isinstance(ids, list) or
                                not all(isinstance(i, str) for i in ids)):
            raise InvalidRequest("field 'ids' must be a list of job ids or null")
        return {"redriven": await broker.redrive(request.path_params["queue"], ids)}

    async def purge(request: Request) -> Any:
        raw = await request.body()
        body = api.parse_json(raw) if raw.strip() else {}
        statuses = body.get("statuses") if isinstance(body, dict) else None
        if statuses is not None and (not isinstance(statuses, list) or
                                     not all(isinstance(s, str) for s in statuses)):
            raise InvalidRequest("field 'statuses' must be a list of statuses")
        return {"purged": await broker.purge(request.path_params["queue"], statuses)}

    async def pause(request: Request) -> Any:
        await broker.set_paused(request.path_params["queue"], True)
        return {"paused": True}

    async def resume(request: Request) -> Any:
        await broker.set_paused(request.path_params["queue"], False)
        return {"paused": False}

    async def queues(request: Request) -> Any:
        return {"queues": broker.queue_names()}

    async def healthz(request: Request) -> Any:
        return {"ok": True, "broker": broker.id, "url": broker.url}

    async def metrics(request: Request) -> Any:
        broker.refresh_gauges()
        return Response(broker.metrics.render(), media_type="text/plain; version=0.0.4")

    async def openapi(request: Request) -> Any:
        return OPENAPI

    q = "/v1/queues/{queue}"
    routes = [
        Route(f"{q}/push", endpoint(push), methods=["POST"]),
        Route(f"{q}/claim", endpoint(claim), methods=["POST"]),
        Route(f"{q}/heartbeat", endpoint(heartbeat), methods=["POST"]),
        Route(f"{q}/complete", endpoint(complete), methods=["POST"]),
        Route(f"{q}/fail", endpoint(fail), methods=["POST"]),
        Route(f"{q}/stage", endpoint(stage), methods=["POST"]),
        Route(f"{q}/publish", endpoint(publish), methods=["POST"]),
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
    return Starlette(routes=routes)
