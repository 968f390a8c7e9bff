"""The OpenAPI 3.1 document of the broker's HTTP API, served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any


def _body(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "properties": props, "required": required}}}}


def _ok(props: dict[str, Any]) -> dict[str, Any]:
    return {"200": {"description": "OK", "content": {"application/json": {"schema": {
        "type": "object", "properties": props}}}},
            "default": {"$ref": "#/components/responses/Error"}}


_RESULTS = {"results": {"type": "array", "items": {"type": "object", "properties": {
    "token": {"type": "string"}, "ok": {"type": "boolean"},
    "reason": {"type": ["string", "null"]}, "status": {"type": "string"}}}}}
_NEW_JOB = {"type": "object", "required": ["payload"], "properties": {
    "payload": {}, "priority": {"type": "integer", "default": 0},
    "delay_s": {"type": "number", "default": 0},
    "max_attempts": {"type": ["integer", "null"]}, "key": {"type": ["string", "null"]}}}
_QUEUE = {"name": "queue", "in": "path", "required": True, "schema": {
    "type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"}}
_REQUEST_KEY = {"name": "Idempotency-Key", "in": "header", "required": False,
                "description": "The caller's key for this call: a repeat with the same key "
                               "(while the queue keeps its receipt, retry_ttl_s) answers what "
                               "the first call answered and changes nothing",
                "schema": {"type": "string", "minLength": 1, "maxLength": 200}}


def _post(summary: str, body: dict[str, Any] | None, ok: dict[str, Any],
          keyed: bool = False) -> dict[str, Any]:
    params = [_QUEUE, _REQUEST_KEY] if keyed else [_QUEUE]
    op: dict[str, Any] = {"summary": summary, "parameters": params, "responses": _ok(ok)}
    if body is not None:
        op["requestBody"] = body
    return {"post": op}


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "osqueue broker", "version": "1"},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "responses": {"Error": {"description": "error", "content": {"application/json": {
            "schema": {"type": "object", "required": ["error", "code"], "properties": {
                "error": {"type": "string"},
                "code": {"type": "string", "description": (
                    "stable code; retry these (503): outcome_unknown (the write may or may "
                    "not have landed: repeat the call, it is idempotent), storage_unavailable, "
                    "not_the_broker (url names the owner), broker_unavailable")},
                "url": {"type": ["string", "null"]}}}}}}},
    },
    "security": [{"bearer": []}],
    "paths": {
        "/v1/queues/{queue}/push": _post(
            "Push jobs", _body({"jobs": {"type": "array", "items": _NEW_JOB}}, ["jobs"]),
            {"ids": {"type": "array", "items": {"type": "string"}}}, keyed=True),
        "/v1/queues/{queue}/claim": _post(
            "Claim jobs (long-poll with wait_s)",
            _body({"worker": {"type": "string"}, "max_jobs": {"type": "integer", "default": 1},
                   "lease_s": {"type": "number", "default": 30},
                   "wait_s": {"type": "number", "default": 0}}, ["worker"]),
            {"jobs": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "string"}, "payload": {}, "token": {"type": "string"},
                "attempt": {"type": "integer"},
                "lease_expires_at": {"type": "string", "format": "date-time"}}}}},
            keyed=True),
        "/v1/queues/{queue}/heartbeat": _post(
            "Extend leases (409 if any token is stale)",
            _body({"tokens": {"type": "array", "items": {"type": "string"}},
                   "lease_s": {"type": "number", "default": 30}}, ["tokens"]), _RESULTS),
        "/v1/queues/{queue}/complete": _post(
            "Complete jobs (409 if any token is stale)",
            _body({"items": {"type": "array", "items": {"type": "object", "properties": {
                "token": {"type": "string"}, "result": {}}, "required": ["token"]}}},
                ["items"]), _RESULTS),
        "/v1/queues/{queue}/fail": _post(
            "Fail jobs: retry with backoff or dead-letter (409 if any token is stale)",
            _body({"items": {"type": "array", "items": {"type": "object", "properties": {
                "token": {"type": "string"}, "error": {"type": "string"},
                "retry_in_s": {"type": ["number", "null"]}}, "required": ["token"]}}},
                ["items"]), _RESULTS),
        "/v1/queues/{queue}/stage": _post(
            "Stage jobs invisibly under a write id (exactly-once Spark writes). The body "
            'is a line {"write_id": ...} and then one job a line: options (empty, or a '
            "JSON object of priority, delay_s, max_attempts, key), a tab, the payload JSON",
            {"required": True, "content": {"application/vnd.osqueue.staged": {
                "schema": {"type": "string"}}}},
            {"staged": {"type": "integer"}}),
        "/v1/queues/{queue}/publish": _post(
            "Publish the staged writes in keep; discard the other writes under prefix",
            _body({"prefix": {"type": "string"}, "keep": {"type": "array"},
                   "once": {"type": ["string", "null"]}}, ["prefix"]),
            {"published": {"type": "integer"}, "discarded": {"type": "integer"},
             "duplicate": {"type": "boolean"}}),
        "/v1/queues/{queue}/redrive": _post("Return dead jobs to pending", None,
                                            {"redriven": {"type": "integer"}}),
        "/v1/queues/{queue}/purge": _post("Delete jobs by status", None,
                                          {"purged": {"type": "integer"}}),
        "/v1/queues/{queue}/pause": _post("Stop handing out jobs", None, {}),
        "/v1/queues/{queue}/resume": _post("Hand out jobs again", None, {}),
        "/v1/queues/{queue}": _post("Create a queue or change its settings", None, {}),
        "/v1/queues/{queue}/stats": {"get": {"summary": "Counts and figures",
                                             "parameters": [_QUEUE], "responses": _ok({})}},
        "/v1/queues/{queue}/jobs": {"get": {"summary": "A page of jobs", "parameters": [
            _QUEUE,
            {"name": "status", "in": "query", "schema": {"type": "string"}},
            {"name": "limit", "in": "query", "schema": {"type": "integer"}},
            {"name": "after", "in": "query", "schema": {"type": "string"}}],
            "responses": _ok({"jobs": {"type": "array"}})}},
        "/healthz": {"get": {"summary": "Liveness, and each queue's role (owner or standby) "
                                        "and fault, if its last batch failed",
                             "security": [], "responses": _ok({
                                 "ok": {"type": "boolean"}, "broker": {"type": "string"},
                                 "faulted_queues": {"type": "array"},
                                 "queues": {"type": "object"}})}},
        "/metrics": {"get": {"summary": "Prometheus metrics",
                             "responses": {"200": {"description": "text"}}}},
    },
}
