"""The app's answers at its edges (broker.http.app, in process over a file store):
one JSON error format for every refusal, short error messages whatever the
size of the bad value, /healthz's bare answer without the token, and refused
tokens logged without the token."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker.http import schemas
from broker.http.app import App
from broker.storage import FileStore
from tests.support.asgi import call
from tests.support.inprocess import run, started

TOKEN = "app-errors-test-token"
HUGE = "x" * (10 * 1024 * 1024)


def with_app(tmp_path: Path, test: Any, token: str | None = TOKEN) -> None:
    async def main() -> None:
        broker = await started(FileStore(tmp_path))
        try:
            await test(App(broker, token=token), broker)
        finally:
            await broker.stop(5)

    run(main())


def error(status: int, out: bytes) -> schemas.ErrorBody:
    body = schemas.ErrorBody.model_validate_json(out)
    assert status >= 400
    return body


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/undocumented"), ("GET", "/healthz/"), ("GET", "/v1/queues/"),
    ("POST", "/v1/queues/q/push/"), ("POST", "/v1/queues/q/nope"), ("GET", "/"),
])
def test_an_unknown_path_is_a_json_404_and_never_a_redirect(tmp_path: Path, method: str,
                                                            path: str) -> None:
    async def test(app: App, broker: Any) -> None:
        status, out, headers = await call(app, method, path, b"{}", token=TOKEN)
        assert status == 404 and error(status, out).code == "not_found"
        assert b"location" not in headers

    with_app(tmp_path, test)


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("GET", "/v1/queues/q/push", "POST"), ("PUT", "/v1/queues/q/claim", "POST"),
    ("DELETE", "/v1/queues/q", "PUT, POST"), ("POST", "/healthz", "GET, HEAD"),
    ("GET", "/v1/queues/q/purge", "POST"),
])
def test_a_wrong_method_is_a_json_405_naming_the_allowed(tmp_path: Path, method: str,
                                                         path: str, allowed: str) -> None:
    async def test(app: App, broker: Any) -> None:
        status, out, headers = await call(app, method, path, token=TOKEN)
        assert status == 405 and error(status, out).code == "method_not_allowed"
        assert set(headers[b"allow"].decode().split(", ")) == set(allowed.split(", "))

    with_app(tmp_path, test)


BIG_BAD = [
    ("POST", "/v1/queues/q/push", {"jobs": [{"payload": 1, "priority": HUGE}]}),
    ("POST", "/v1/queues/q/push", {"jobs": [{"payload": 1, "delay_s": [HUGE]}]}),
    ("POST", "/v1/queues/q/push", {"jobs": [{"payload": 1, HUGE: 1}]}),
    ("POST", "/v1/queues/q/claim", {"worker": "w", "lease_s": HUGE}),
    ("POST", "/v1/queues/q/claim", {"worker": "w", "max_jobs": HUGE}),
    ("POST", "/v1/queues/q/publish", {"prefix": "p/", "keep": [HUGE]}),
    ("PUT", "/v1/queues/q", {"settings": {"max_attempts": HUGE}}),
    ("PUT", "/v1/queues/q", {"settings": {HUGE: 1}}),
    ("POST", "/v1/queues/q/purge", {"statuses": [HUGE]}),
    ("POST", "/v1/queues/q/redrive", {"ids": [HUGE]}),
    ("POST", f"/v1/queues/{HUGE}/push", {"jobs": [{"payload": 1}]}),
]


@pytest.mark.parametrize(("method", "path", "body"), BIG_BAD,
                         ids=[f"{m} {p[:30]} {i}" for i, (m, p, _) in enumerate(BIG_BAD)])
def test_a_10_mib_bad_value_gets_a_short_422(tmp_path: Path, method: str, path: str,
                                            body: Any) -> None:
    async def test(app: App, broker: Any) -> None:
        status, out, _ = await call(app, method, path, orjson.dumps(body), token=TOKEN)
        assert status == 422 and error(status, out).code == "invalid_request", out[:300]
        assert len(out) < 1000, out[:300]

    with_app(tmp_path, test)


def test_a_10_mib_bad_staged_option_or_status_gets_a_short_422(tmp_path: Path) -> None:
    async def test(app: App, broker: Any) -> None:
        staged = b'{"' + HUGE.encode() + b'": 1}\t1\n'
        status, out, _ = await call(app, "POST", "/v1/queues/q/push", staged, token=TOKEN,
                                    content_type="application/vnd.osqueue.staged")
        assert status == 422 and len(out) < 1000, out[:300]
        await call(app, "POST", "/v1/queues/q/push", b'{"jobs": [{"payload": 1}]}',
                   token=TOKEN)
        status, out, _ = await call(app, "GET", "/v1/queues/q/jobs", token=TOKEN,
                                    query=f"status={HUGE}")
        assert status == 422 and len(out) < 1000, out[:300]

    with_app(tmp_path, test)


def test_healthz_without_the_token_says_only_ok(tmp_path: Path) -> None:
    async def test(app: App, broker: Any) -> None:
        await call(app, "POST", "/v1/queues/secret-queue-name/push",
                   b'{"jobs": [{"payload": 1}]}', token=TOKEN)
        for token in (None, "wrong-token"):
            status, out, _ = await call(app, "GET", "/healthz", token=token)
            assert (status, orjson.loads(out)) == (200, {"ok": True})
        status, out, _ = await call(app, "GET", "/healthz", token=TOKEN)
        details = schemas.Health.model_validate_json(out)
        assert status == 200 and details.queues is not None and details.broker == broker.id
        assert details.queues["secret-queue-name"].role == "owner"
        await broker.stop(5)  # stopping: not ok
        status, out, _ = await call(app, "GET", "/healthz", token=None)
        assert (status, orjson.loads(out)) == (503, {"ok": False})
        status, out, _ = await call(app, "GET", "/healthz", token=TOKEN)
        assert status == 200 and orjson.loads(out)["stopping"] is True

    with_app(tmp_path, test)


def test_healthz_of_a_broker_without_a_token_gives_the_details(tmp_path: Path) -> None:
    async def test(app: App, broker: Any) -> None:
        status, out, _ = await call(app, "GET", "/healthz", token=None)
        assert status == 200 and orjson.loads(out)["broker"] == broker.id

    with_app(tmp_path, test, token=None)


def test_a_refused_token_is_logged_without_the_token(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    wrong = "wrong-token-that-must-not-be-logged"

    async def test(app: App, broker: Any) -> None:
        with caplog.at_level(logging.WARNING, logger="osqueue.http"):
            for method, path in (("POST", "/v1/queues/q/push"), ("GET", "/v1/queues/q/stats"),
                                 ("POST", "/v1/queues/q/purge")):
                status, _, _ = await call(app, method, path, b'{"all": true}', token=wrong)
                assert status == 401
            app.guard.flush()  # the end of the log window (a timer, 60 s on)

    with_app(tmp_path, test)
    refused = [r for r in caplog.records if r.name == "osqueue.http"]
    # the first refusal in full, the others summed up (broker.http.throttle)
    assert [r.levelno for r in refused] == [logging.WARNING] * 2
    assert "POST '/v1/queues/q/push' from 127.0.0.1:1" in refused[0].getMessage()
    assert "refused 2 more requests" in refused[1].getMessage()
    assert "from 1 address" in refused[1].getMessage()
    for record in caplog.records:
        assert wrong not in record.getMessage() and TOKEN not in record.getMessage()
        assert "Bearer" not in record.getMessage()
