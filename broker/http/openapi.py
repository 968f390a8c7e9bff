"""The OpenAPI 3.1 document of the HTTP API, generated from the routes table.

Every operation comes from a :class:`broker.http.route.Route`: its summary, its
request model and its response model (:mod:`broker.http.schemas`), so the document
says what the parsers check and cannot drift from the routes served. Served
at ``/openapi.json``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.json_schema import models_json_schema

from broker.errors import OsqueueError
from broker.http.route import Route
from broker.http.schemas import ErrorBody
from broker.limits import MAX_REQUEST_KEY_CHARS, QUEUE_NAME_PATTERN
from broker.wire import STAGED_CONTENT_TYPE

REF = "#/components/schemas/{model}"
#: What every operation meets besides its own schema (docs/security.md).
DESCRIPTION = (
    "A call that changes a queue (every method but GET and HEAD) needs the content type "
    "its operation lists (application/json, or the staged lines' type): 415 "
    "unsupported_media_type otherwise. A call a browser sent for another site's or origin's "
    "page (Sec-Fetch-Site other than same-origin or none; a foreign Origin or Referer) is "
    "refused 403 forbidden, and so, by a broker without a token, is a call whose Host is "
    "neither a loopback name nor the broker's advertised host.")

QUEUE_PARAM = {"name": "queue", "in": "path", "required": True,
               "schema": {"type": "string", "pattern": QUEUE_NAME_PATTERN}}
JOB_PARAM = {"name": "job_id", "in": "path", "required": True,
             "schema": {"type": "string", "pattern": "^j[0-9]{10,15}$"}}
KEY_PARAMS = [
    {"name": "Idempotency-Key", "in": "header", "required": False,
     "description": "The caller's key for this call: a repeat with the same key (while the "
                    "queue keeps its receipt, retry_ttl_s) answers what the first call "
                    "answered and changes nothing (a push under it with other jobs is "
                    "refused, 422 request_key_reused)",
     "schema": {"type": "string", "minLength": 1, "maxLength": MAX_REQUEST_KEY_CHARS}},
    {"name": "Idempotency-Floor", "in": "header", "required": False,
     "description": "For keys r-{client}-{n}: that client's calls numbered below this have "
                    "their answers (their receipts are dropped)",
     "schema": {"type": "string", "pattern": "^[0-9]+$"}},
]


def _codes() -> str:
    """Every stable error code, from the error tree; the retryable ones marked."""
    seen: dict[str, bool] = {"internal": False}  # an unexpected fault (500)
    todo: list[type[OsqueueError]] = [OsqueueError]
    while todo:
        cls = todo.pop()
        seen.setdefault(cls.code, cls.retryable)
        todo.extend(cls.__subclasses__())
    retry = sorted(c for c, r in seen.items() if r)
    return (f"stable code, one of {', '.join(sorted(seen))}; retry these (same call, it "
            f"is idempotent): {', '.join(retry)}")


def _needs_body(model: type[BaseModel]) -> bool:
    """Whether ``model`` refuses an empty body (which the app reads as ``{}``)."""
    try:
        model.model_validate({})
    except ValidationError:
        return True
    return False


def _operation(route: Route, refs: dict[type[BaseModel], str]) -> dict[str, Any]:
    params: list[dict[str, Any]] = [QUEUE_PARAM] if "{queue}" in route.path else []
    if "{job_id}" in route.path:
        params.append(JOB_PARAM)
    if route.keyed:
        params += KEY_PARAMS
    if route.query is not None:
        props = route.query.model_json_schema()["properties"]
        params += [{"name": name, "in": "query", "required": False, "schema": schema}
                   for name, schema in props.items()]
    op: dict[str, Any] = {"summary": route.summary, "operationId":
                          f"{route.method.lower()}_{route.handler.__name__}"}
    if params:
        op["parameters"] = params
    if not route.auth:
        op["security"] = []
    if route.request is not None:
        json_body = {"application/json": {"schema": {"$ref": refs[route.request]}}}
        staged = {STAGED_CONTENT_TYPE: {"schema": {"type": "string"}}}
        content = {"json": json_body, "staged": staged,
                   "json_or_staged": {**json_body, **staged}}[route.body]
        if route.body == "staged":
            content[STAGED_CONTENT_TYPE]["schema"]["description"] = (
                f"the first line is {refs[route.request]} as JSON; then staged lines")
        op["requestBody"] = {"required": route.hot or _needs_body(route.request),
                             "content": content}
    ok: dict[str, Any] = {"description": "OK"}
    if route.response is not None:
        ok["content"] = {"application/json": {"schema": {"$ref": refs[route.response]}}}
    elif route.media_type != "application/json":
        ok["content"] = {route.media_type: {"schema": {"type": "string"}}}
    else:
        ok["content"] = {"application/json": {"schema": {"type": "object"}}}
    op["responses"] = {"200": ok, "default": {"$ref": "#/components/responses/Error"}}
    return op


def document(routes: Iterable[Route]) -> dict[str, Any]:
    """The OpenAPI document for ``routes``."""
    routes = list(routes)
    models = {m for r in routes for m in (r.request, r.response) if m is not None}
    models.add(ErrorBody)
    ordered = sorted(models, key=lambda m: m.__name__)
    keys, defs = models_json_schema([(m, "validation") for m in ordered],
                                    ref_template=REF)
    refs = {m: keys[(m, "validation")]["$ref"] for m in ordered}
    error_schema = dict(defs["$defs"]["ErrorBody"])
    error_schema["properties"] = {**error_schema["properties"], "code": {
        **error_schema["properties"]["code"], "description": _codes()}}
    defs["$defs"]["ErrorBody"] = error_schema
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, refs)
    return {
        "openapi": "3.1.0",
        "info": {"title": "osqueue broker", "version": "1", "description": DESCRIPTION},
        "components": {
            "schemas": defs["$defs"],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {"Error": {"description": "error", "content": {"application/json": {
                "schema": {"$ref": refs[ErrorBody]}}}}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
