"""The HTTP API's routes: one table, one handler function each.

:data:`ROUTES` names every route the broker serves: its method and path, its
handler, whether it needs the bearer token, its request and response models
(:mod:`broker.http.schemas`, from which :mod:`broker.http.openapi` writes the document)
and a summary. :mod:`broker.http.app` serves the table.

Two kinds of handler:

* hot (``hot=True``: push, claim, heartbeat, complete, fail, stage, publish):
  ``(broker, queue, body, request_key, receive) -> (status, body)``, given the
  body already decoded (or its bytes, for staged lines) and the ASGI
  ``receive`` (a long-poll claim watches it for its client leaving, see
  :mod:`broker.http.disconnect`), served without the router
  (``bench/broker_bench.py``);
* the rest: ``(broker, request, body) -> body`` (a JSON-able value or a
  Response), served by Starlette's router; ``body`` is the request already
  validated by the route's model (None for a route without one).

A handler raises an :class:`~broker.errors.OsqueueError` for a bad call; the
server turns it into ``{"error", "code"}`` with the error's status.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from broker.errors import InvalidRequest, StaleToken
from broker.gcpause import gc_paused_for
from broker.http import openapi, parsers, schemas
from broker.http.disconnect import claim_while_connected, hand_back_lost
from broker.http.route import (
    JSON_OR_STAGED,
    STAGED,
    Receive,
    RequestKey,
    Route,
)
from broker.model.checks import parse_staged
from broker.model.columns import plain_rows
from broker.service import metrics
from broker.service.broker import Broker
from broker.wire import STAGED_CONTENT_TYPE, ItemResult

# -- hot handlers ------------------------------------------------------------------

def _batch_answer(results: Sequence[ItemResult]) -> tuple[int, Any]:
    with gc_paused_for(len(results)):
        body = {"results": parsers.items_to_json(results)}
    if all(ok for _, ok, _, _ in plain_rows(results)):
        return 200, body
    stale = StaleToken("one or more tokens are stale (see results)")
    return stale.status, {**stale.to_dict(), **body}


async def push(broker: Broker, queue: str, body: Any, key: RequestKey,
              receive: Receive | None = None) -> tuple[int, Any]:
    if isinstance(body, bytes):  # staged lines
        jobs = parse_staged(body, check=True,
                                max_payload_bytes=broker.config.max_request_bytes, where="line")
    else:
        jobs = parsers.parse_push(body)
    return 200, {"ids": await broker.push(queue, jobs, *key)}


async def claim(broker: Broker, queue: str, body: Any, key: RequestKey,
                receive: Receive | None = None) -> tuple[int, Any]:
    request, floor = key
    args = parsers.parse_claim(body)
    if args["wait_s"] and receive is not None:  # a long poll: its client may leave meanwhile
        jobs = await claim_while_connected(broker, queue, receive, **args, request=request,
                                           floor=floor)
    else:
        jobs = await broker.claim(queue, **args, request=request, floor=floor)
    with gc_paused_for(len(jobs)):
        return 200, {"jobs": parsers.claimed_to_json(jobs)}


async def heartbeat(broker: Broker, queue: str, body: Any, key: RequestKey,
                   receive: Receive | None = None) -> tuple[int, Any]:
    tokens, lease_s = parsers.parse_heartbeat(body)
    return _batch_answer(await broker.heartbeat(queue, tokens, lease_s))


async def complete(broker: Broker, queue: str, body: Any, key: RequestKey,
                  receive: Receive | None = None) -> tuple[int, Any]:
    listed = body.get("items") if isinstance(body, dict) else None
    with gc_paused_for(len(listed) if isinstance(listed, list) else 0):
        items = parsers.parse_complete(body)
    return _batch_answer(await broker.complete(queue, items))


async def fail(broker: Broker, queue: str, body: Any, key: RequestKey,
              receive: Receive | None = None) -> tuple[int, Any]:
    return _batch_answer(await broker.fail(queue, parsers.parse_fail(body)))


async def stage(broker: Broker, queue: str, body: bytes, key: RequestKey,
                receive: Receive | None = None) -> tuple[int, Any]:
    write_id, lines = parsers.parse_stage(body)
    return 200, {"staged": await broker.stage(queue, write_id, lines)}


async def publish(broker: Broker, queue: str, body: Any, key: RequestKey,
                 receive: Receive | None = None) -> tuple[int, Any]:
    prefix, keep, once = parsers.parse_publish(body)
    return 200, await broker.publish(queue, prefix, keep, once)


# -- the rest ----------------------------------------------------------------------

def request_key(request: Request) -> RequestKey:
    """The call's ``Idempotency-Key`` and ``Idempotency-Floor``, checked."""
    headers = request.headers
    key, floor = headers.get("idempotency-key"), headers.get("idempotency-floor")
    return (parsers.parse_request_key(None if key is None else key.encode()),
            parsers.parse_request_floor(None if floor is None else floor.encode()))


async def stats(broker: Broker, request: Request, body: None) -> Any:
    return await broker.stats(request.path_params["queue"])


async def jobs(broker: Broker, request: Request, body: None) -> Any:
    q = request.query_params
    try:
        limit = int(q.get("limit", "100"))
    except ValueError:
        raise InvalidRequest("limit must be an integer") from None
    tokens = q.get("tokens", "false")
    if tokens not in ("true", "false"):
        raise InvalidRequest("tokens must be true or false")
    page = await broker.jobs(request.path_params["queue"], q.get("status") or None,
                             limit, q.get("after") or None, raw=True, tokens=tokens == "true")
    # (a page is full or the last: Broker.jobs reads on past the segments a step loads)
    return {"jobs": page, "next_after": page[-1]["id"] if len(page) == limit else None}


async def job(broker: Broker, request: Request, body: None) -> Any:
    return await broker.job(request.path_params["queue"], request.path_params["job_id"])


async def create(broker: Broker, request: Request, body: schemas.CreateRequest) -> Any:
    settings = body.model_dump(exclude_unset=True).get("settings", {})
    return await broker.create_queue(request.path_params["queue"], settings)


async def redrive(broker: Broker, request: Request, body: schemas.RedriveRequest) -> Any:
    ids = None if body.all else body.ids  # None: every dead job, asked for with "all"
    return {"redriven": await broker.redrive(request.path_params["queue"], ids,
                                             *request_key(request))}


async def purge(broker: Broker, request: Request, body: schemas.PurgeRequest) -> Any:
    # None: every pending and dead job, asked for with "all"
    statuses: list[str] | None = None if body.all else list(body.statuses or ())
    return {"purged": await broker.purge(request.path_params["queue"], statuses,
                                         *request_key(request))}


async def cancel(broker: Broker, request: Request, body: schemas.CancelRequest) -> Any:
    answers = await broker.cancel(request.path_params["queue"], body.ids)
    return {"results": [a._asdict() for a in answers]}


async def pause(broker: Broker, request: Request, body: schemas.NoBody) -> Any:
    await broker.set_paused(request.path_params["queue"], True)
    return {"paused": True}


async def resume(broker: Broker, request: Request, body: schemas.NoBody) -> Any:
    await broker.set_paused(request.path_params["queue"], False)
    return {"paused": False}


async def queues(broker: Broker, request: Request, body: None) -> Any:
    return {"queues": broker.queue_names()}


async def healthz(broker: Broker, request: Request, body: None) -> Any:
    """The broker's health; without a valid token (when one is required) only
    ``{"ok": ...}``, 503 when not ok: no queue names, ids, URLs or fault text."""
    health = broker.health()
    if request.state.authorized:
        return health
    ok = bool(health["ok"])
    return Response(orjson.dumps({"ok": ok}), 200 if ok else 503,
                    media_type="application/json")


async def metrics_text(broker: Broker, request: Request, body: None) -> Any:
    broker.refresh_gauges()
    return Response(broker.metrics.exposition(), media_type=metrics.CONTENT_TYPE)


@functools.cache
def openapi_document() -> bytes:
    """The OpenAPI document of :data:`ROUTES`, as JSON (built once)."""
    return orjson.dumps(openapi.document(ROUTES))


async def openapi_json(broker: Broker, request: Request, body: None) -> Any:
    return Response(openapi_document(), media_type="application/json")


Q = "/v1/queues/{queue}"
S = schemas

#: Every route the broker serves, in the order the OpenAPI document lists them.
ROUTES: tuple[Route, ...] = (
    Route("POST", f"{Q}/push", push, "Push jobs. With content type "
          f"{STAGED_CONTENT_TYPE} the body is staged lines (see stage)",
          S.PushRequest, S.Ids, hot=True, body=JSON_OR_STAGED, keyed=True),
    Route("POST", f"{Q}/claim", claim, "Claim jobs (long-poll with wait_s). If the client "
          "disconnects before the answer is sent, the claim stops waiting and hands back any "
          "jobs it got (pending again, the attempt not counted, the tokens stale)",
          S.ClaimRequest, S.Claimed, hot=True, keyed=True, lost=hand_back_lost),
    Route("POST", f"{Q}/heartbeat", heartbeat, "Extend leases (409 if any token is stale, "
          "or its job cancelled: status cancelled)",
          S.HeartbeatRequest, S.Results, hot=True),
    Route("POST", f"{Q}/complete", complete, "Complete jobs (409 if any token is stale, or its job "
          "cancelled: status cancelled, nothing recorded)",
          S.CompleteRequest, S.Results, hot=True),
    Route("POST", f"{Q}/fail", fail, "Fail jobs: retry with backoff or dead-letter "
          "(409 if any token is stale)", S.FailRequest, S.Results, hot=True),
    Route("POST", f"{Q}/stage", stage, "Stage jobs invisibly under a write id (exactly-once "
          'Spark writes). The body is a line {"write_id": ...} and then one job a line: '
          "options (empty, or a JSON object of priority, delay_s, max_attempts, key), a tab, "
          "the payload JSON", S.StageHeader, S.Staged, hot=True, body=STAGED),
    Route("POST", f"{Q}/publish", publish, "Publish the staged writes in keep; discard the "
          "other writes under prefix", S.PublishRequest, S.Published, hot=True),
    Route("POST", f"{Q}/redrive", redrive, 'Return dead jobs to pending: those in ids, or '
          'every one with {"all": true}', S.RedriveRequest, S.Redriven, keyed=True),
    Route("POST", f"{Q}/purge", purge, "Delete jobs by status: those in statuses, or every "
          'pending and dead job with {"all": true}', S.PurgeRequest, S.Purged, keyed=True),
    Route("POST", f"{Q}/cancel", cancel, "Cancel jobs by id: a pending or delayed job is "
          "cancelled (archived as cancelled), a claimed one marked (its next heartbeat, "
          "complete or fail is answered cancelled); one answer per id, unknown or finished "
          "jobs unchanged", S.CancelRequest, S.CancelResults),
    Route("POST", f"{Q}/pause", pause, "Stop handing out jobs", S.NoBody, S.Paused),
    Route("POST", f"{Q}/resume", resume, "Hand out jobs again", S.NoBody, S.Paused),
    Route("PUT", Q, create, "Create a queue or change its settings", S.CreateRequest, S.Stats),
    Route("POST", Q, create, "Create a queue or change its settings", S.CreateRequest, S.Stats),
    Route("GET", f"{Q}/stats", stats, "Counts and figures", None, S.Stats),
    Route("GET", f"{Q}/jobs", jobs, "A page of jobs in enqueue order, full unless it is the "
          "last (follow next_after until null); leases show their tokens only with "
          "tokens=true", None, S.JobsPage, query=S.JobsQuery),
    Route("GET", f"{Q}/jobs/{{job_id}}", job, "One job by id, wherever it is: the queue "
          "object, a segment object or the archive (404 job_not_found if none holds it: "
          "no such id, or purged)", None, S.JobFound),
    Route("GET", "/v1/queues", queues, "The queues this broker serves or watches",
          None, S.Queues),
    Route("GET", "/healthz", healthz, "Liveness: ok (503 when not ok); with the token, also "
          "each queue's role (owner or standby) and fault, if its last batch failed",
          None, S.Health, auth=False),
    Route("GET", "/metrics", metrics_text, "Prometheus metrics", None, None,
          media_type="text/plain"),
    Route("GET", "/openapi.json", openapi_json, "This document", None, None, auth=False),
)
