"""The routes table, the served app and the OpenAPI document agree.

Each route is called in process (ASGI, no sockets) on a broker over a file
store; its answer must validate against the response model the document names.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from pydantic import BaseModel
from starlette.routing import Route as StarletteRoute

from broker.http import schemas
from broker.http.app import App
from broker.http.routes import ROUTES, openapi_document
from broker.storage import FileStore
from broker.wire import STAGED_CONTENT_TYPE, encode_staged_line
from tests.support import asgi
from tests.support.inprocess import run, started

TOKEN = "t0ken-for-openapi-tests"
Q = "q"


async def call(app: App, method: str, path: str, body: bytes = b"", *,
               token: str | None = TOKEN, content_type: str = "application/json",
               query: str = "") -> tuple[int, bytes]:
    """One request through the ASGI app: ``(status, body)``."""
    status, out, _ = await asgi.call(app, method, path, body, token=token,
                                     content_type=content_type, query=query)
    return status, out


def test_every_route_in_the_table_is_in_the_document() -> None:
    doc = orjson.loads(openapi_document())
    for route in ROUTES:
        op = doc["paths"][route.path][route.method.lower()]
        assert op["summary"] == route.summary
        if route.response is not None:
            ref = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
            assert ref.rsplit("/", 1)[1] in doc["components"]["schemas"]
        assert ("security" in op) is (not route.auth)
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert documented == {(r.path, r.method.lower()) for r in ROUTES}


def test_every_route_the_app_serves_is_documented(tmp_path: Path) -> None:
    doc = orjson.loads(openapi_document())

    async def main() -> None:
        broker = await started(FileStore(tmp_path))
        try:
            app = App(broker)
            served = {(r.path, m.lower()) for r in app.rest.routes
                      if isinstance(r, StarletteRoute) for m in (r.methods or ())
                      if m != "HEAD"}
            served |= {(f"/v1/queues/{{queue}}/{action}", "post") for action in app.hot}
            assert served == {(p, m) for p, ops in doc["paths"].items() for m in ops}
            status, _ = await call(app, "GET", "/v1/undocumented")
            assert status == 404
            assert (await call(app, "HEAD", "/healthz"))[0] == 200
        finally:
            await broker.stop(5)

    run(main())


def _lines(*payloads: bytes) -> bytes:
    return b"".join(encode_staged_line(p) for p in payloads)


def test_every_route_answers_what_its_response_model_says(tmp_path: Path) -> None:
    """Call every route once, in an order that makes each succeed; check the
    status and validate the body with the route's response model."""
    bodies: dict[tuple[str, str], tuple[bytes, str, str]] = {
        ("PUT", "/v1/queues/{queue}"): (b'{"settings": {"max_attempts": 2}}', "", ""),
        ("POST", "/v1/queues/{queue}"): (b"", "", ""),
        ("POST", "/v1/queues/{queue}/push"): (b'{"jobs": [{"payload": 1}, {"payload": 2, '
                                              b'"priority": 3}, {"payload": 3}]}', "", ""),
        ("POST", "/v1/queues/{queue}/stage"): (b'{"write_id": "w/1"}\n' + _lines(b"4"),
                                               STAGED_CONTENT_TYPE, ""),
        ("POST", "/v1/queues/{queue}/publish"): (b'{"prefix": "w/", "keep": ["w/1"]}', "", ""),
        ("POST", "/v1/queues/{queue}/claim"): (b'{"worker": "w", "max_jobs": 3}', "", ""),
        ("GET", "/v1/queues/{queue}/jobs"): (b"", "", "limit=2"),
        ("POST", "/v1/queues/{queue}/cancel"): (b'{"ids": ["j0000000003", "j0000000099"]}',
                                                "", ""),
    }
    tokens: list[str] = []

    def body_for(method: str, path: str) -> tuple[bytes, str, str]:
        if path.endswith("/heartbeat"):
            return orjson.dumps({"tokens": tokens[:1]}), "", ""
        if path.endswith("/complete"):
            return orjson.dumps({"items": [{"token": tokens[0], "result": "r"}]}), "", ""
        if path.endswith("/fail"):
            return orjson.dumps({"items": [{"token": tokens[1], "error": "e",
                                            "retry_in_s": None}]}), "", ""
        if path.endswith("/redrive"):
            return b'{"all": true}', "", ""
        if path.endswith("/purge"):
            return b'{"statuses": ["dead"]}', "", ""
        return bodies.get((method, path), (b"", "", ""))

    async def main() -> None:
        broker = await started(FileStore(tmp_path))
        try:
            app = App(broker, token=TOKEN)
            for route in ROUTES:
                body, ctype, query = body_for(route.method, route.path)
                path = route.path.replace("{queue}", Q).replace("{job_id}", "j0000000001")
                status, out = await call(app, route.method, path, body, query=query,
                                         content_type=ctype or "application/json")
                assert status == 200, (route.path, out)
                if route.path.endswith("/claim"):
                    tokens.extend(j["token"] for j in orjson.loads(out)["jobs"])
                if route.response is not None:
                    model: type[BaseModel] = route.response
                    model.model_validate_json(out)
                elif route.path == "/openapi.json":
                    assert orjson.loads(out)["paths"]
                if route.auth:
                    status, out = await call(app, route.method, path, body, token=None,
                                             content_type=ctype or "application/json")
                    assert status == 401
                    schemas.ErrorBody.model_validate_json(out)
        finally:
            await broker.stop(5)

    run(main())


@pytest.mark.parametrize("path", ["/v1/queues/q/push", "/v1/queues/q/redrive"])
def test_error_bodies_match_the_error_model(tmp_path: Path, path: str) -> None:
    async def main() -> None:
        broker = await started(FileStore(tmp_path))
        try:
            status, out = await call(App(broker), "POST", path, b"{not json")
            assert status == 400
            assert schemas.ErrorBody.model_validate_json(out).code == "bad_request"
        finally:
            await broker.stop(5)

    run(main())
