"""The API's gate (broker.http.gate.Gate and App.check_type), through the broker's
ASGI app in process over a memory store: no web page may drive a broker.

* A broker without a token answers only a loopback ``Host`` or its advertised
  one (a DNS-rebinding page names its own host), on every route;
* no broker answers a request a browser marks as sent by another site's page
  (``Sec-Fetch-Site`` other than ``same-origin``/``none``, a foreign ``Origin``
  or ``Referer``);
* a state-changing request must carry its route's content type (JSON, or the
  staged lines'): every type a page can send without a preflight is refused.

Every refusal is a JSON error with its stable code, holds no queue data, and
leaves the store byte-identical (each object's bytes and etag compared). The
same rules over real sockets, and in a real browser, are in
test_api_gate_process.py and test_api_browser_attack.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import orjson
import pytest

from broker.errors import Forbidden
from broker.http import schemas
from broker.http.app import App, build_app
from broker.http.gate import KNOWN_HOSTS, LOG_EVERY_S, Gate
from broker.http.hosts import host_name, is_loopback
from broker.service.broker import Broker
from broker.storage import MemoryStore, ObjectStore
from broker.wire import STAGED_CONTENT_TYPE
from tests.support.asgi import call
from tests.support.inprocess import run, started
from tests.support.store_files import snapshot

TOKEN = "api-gate-test-token-4d1e"
URL = "http://127.0.0.1:8765"
HOST = "127.0.0.1:8765"
PAYLOAD = "secret-payload-7a3f"

#: Every route that reads, with what a leak would show.
READS = [("GET", "/v1/queues/q/stats"), ("GET", "/v1/queues/q/jobs"),
         ("GET", "/v1/queues"), ("GET", "/healthz"), ("HEAD", "/healthz"),
         ("GET", "/metrics"), ("GET", "/openapi.json")]
#: Every route that changes a queue, with a body it would take.
CHANGES = [("POST", "/v1/queues/q/push", b'{"jobs": [{"payload": 1}]}'),
           ("POST", "/v1/queues/q/purge", b'{"all": true}'),
           ("POST", "/v1/queues/q/pause", b"{}"),
           ("POST", "/v1/queues/q/resume", b"{}"),
           ("POST", "/v1/queues/q/redrive", b'{"all": true}'),
           ("POST", "/v1/queues/q/cancel", b'{"ids": ["j0000000001"]}'),
           ("POST", "/v1/queues/q", b'{"settings": {"max_attempts": 1}}'),
           ("PUT", "/v1/queues/q", b'{"settings": {"max_attempts": 1}}'),
           ("POST", "/v1/queues/q/claim", b'{"worker": "w"}'),
           ("POST", "/v1/queues/q/heartbeat", b'{"tokens": ["x"]}'),
           ("POST", "/v1/queues/q/complete", b'{"items": [{"token": "x"}]}'),
           ("POST", "/v1/queues/q/fail", b'{"items": [{"token": "x", "error": "e"}]}'),
           ("POST", "/v1/queues/q/publish", b'{"prefix": "w/", "keep": []}')]
#: Content types a web page can send without a CORS preflight, and others no route takes.
PAGE_TYPES = ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
              "multipart/form-data; boundary=x", ""]
OTHER_TYPES = ["application/jsonx", "application/json-seq", "json", "*/*",
               STAGED_CONTENT_TYPE + "x", "application/xml"]


@asynccontextmanager
async def api(token: str | None = None, url: str = URL
              ) -> AsyncIterator[tuple[Broker, App, ObjectStore]]:
    """A broker advertising ``url`` with queue ``q`` (two pending jobs, one claimed
    for an hour) and its app."""
    store = MemoryStore()
    broker = await started(store, url)
    try:
        await broker.create_queue("q", {})
        await broker.push("q", [orjson.dumps({"p": PAYLOAD, "n": n}) for n in range(3)])
        await broker.claim("q", "w", lease_s=3600)
        yield broker, build_app(broker, token=token), store
    finally:
        await broker.stop(5)


def refused(status: int, out: bytes, code: str) -> schemas.ErrorBody:
    """The error of a refusal with ``code``, which shows no queue data."""
    assert status == {"forbidden": 403, "unsupported_media_type": 415}[code], (status, out)
    body = schemas.ErrorBody.model_validate_json(out)
    assert body.code == code, out
    for leak in (PAYLOAD.encode(), b"j0000000001", b'"queues"', b'"jobs"'):
        assert leak not in out
    return body


async def each_route(app: App, headers: dict[str, str], *, token: str | None = None,
                     content_type: str = "application/json"
                     ) -> list[tuple[str, str, int, bytes]]:
    """Every route once with ``headers``: ``(method, path, status, body)`` each."""
    answers = []
    for method, path in READS:
        status, out, _ = await call(app, method, path, token=token, headers=headers,
                                    query="tokens=true" if path.endswith("/jobs") else "")
        answers.append((method, path, status, out))
    for method, path, body in CHANGES:
        status, out, _ = await call(app, method, path, body, token=token, headers=headers,
                                    content_type=content_type)
        answers.append((method, path, status, out))
    return answers


def with_api(test: Callable[[Broker, App, ObjectStore], Awaitable[None]],
             token: str | None = None, url: str = URL) -> None:
    async def main() -> None:
        async with api(token, url) as (broker, app, store):
            await test(broker, app, store)

    run(main())


# -- the Host rule ------------------------------------------------------------------

@pytest.mark.parametrize("host", [
    "evil.example:8765", "evil.example", "EVIL.example:8765", "127.0.0.1.evil.example:8765",
    "localhost.evil.example:8765", "evil.example.:8765", "10.1.2.3:8765", "[::2]:8765",
    "0.0.0.0:8765", "2130706433:8765", "", "[bad"])
def test_gate_refuses_a_host_a_broker_without_a_token_does_not_answer_to(host: str) -> None:
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        before = snapshot(store)
        for method, path, status, out in await each_route(app, {"host": host}):
            error = refused(status, out, "forbidden")
            assert "no bearer token" in error.error, (method, path, error)
            assert URL not in out.decode()  # (a rebinding page reads this answer)
        assert snapshot(store) == before
        assert (await broker.stats("q"))["paused"] is False

    with_api(test)


@pytest.mark.parametrize("host", [
    "127.0.0.1:8765", "127.0.0.1", "127.9.8.7:1", "localhost:8765", "LOCALHOST:9999",
    "localhost.:8765", "LocalHost.", "[::1]:8765", "[::1]", "[::ffff:127.0.0.1]:8765"])
def test_gate_answers_a_loopback_host_on_any_port(host: str) -> None:
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        status, out, _ = await call(app, "GET", "/v1/queues/q/jobs", headers={"host": host},
                                    query="tokens=true")
        assert status == 200 and PAYLOAD.encode() in out
        status, out, _ = await call(app, "POST", "/v1/queues/q/pause", b"{}",
                                    headers={"host": host})
        assert status == 200 and (await broker.stats("q"))["paused"] is True

    with_api(test)


@pytest.mark.parametrize("host", ["broker.example:8765", "Broker.Example:80",
                                  "broker.example.:8765", "broker.example"])
def test_gate_answers_the_advertised_host_too(host: str) -> None:
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        status, out, _ = await call(app, "GET", "/v1/queues/q/stats", headers={"host": host})
        assert status == 200, out
        before = snapshot(store)
        status, out, _ = await call(app, "GET", "/v1/queues/q/stats",
                                    headers={"host": "other.example:8765"})
        refused(status, out, "forbidden")
        assert snapshot(store) == before

    with_api(test, url="http://broker.example:8765")


def test_gate_answers_any_host_with_a_token_and_still_needs_the_token() -> None:
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        status, out, _ = await call(app, "GET", "/v1/queues/q/jobs", token=TOKEN,
                                    headers={"host": "broker.internal.example:443"})
        assert status == 200 and PAYLOAD.encode() in out
        before = snapshot(store)
        status, out, _ = await call(app, "POST", "/v1/queues/q/purge", b'{"all": true}',
                                    headers={"host": "evil.example:8765"})
        assert status == 401 and PAYLOAD.encode() not in out
        assert snapshot(store) == before

    with_api(test, token=TOKEN)


def test_gate_answers_a_request_without_host() -> None:
    """HTTP/1.0 may leave it out; every browser sends one."""
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        status, _, _ = await call(app, "GET", "/v1/queues/q/stats")
        assert status == 200

    with_api(test)


# -- requests a browser sent for another site's page ----------------------------------

CROSS_SITE = [
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site"},
    {"sec-fetch-site": "cross-site", "origin": URL},  # the broker's own origin does not help
    {"origin": "http://evil.example"},
    {"origin": "http://127.0.0.1:9999"},  # another port of the same machine: same site
    {"origin": "http://localhost:8765"},  # the same broker by another name
    {"origin": "http://127.0.0.1:87650"},
    {"origin": "null"},  # a sandboxed frame, a file:// page
    {"origin": ""},
    {"origin": "http://evil.example", "sec-fetch-site": "same-origin"},
    {"referer": "http://evil.example/attack.html"},
    {"referer": "http://127.0.0.1:9999/"},
]


@pytest.mark.parametrize("token", [None, TOKEN])
@pytest.mark.parametrize("headers", CROSS_SITE)
def test_gate_refuses_a_request_a_browser_sent_for_another_sites_page(
        headers: dict[str, str], token: str | None) -> None:
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        before = snapshot(store)
        for method, path, status, out in await each_route(app, {"host": HOST, **headers},
                                                          token=token):
            error = refused(status, out, "forbidden")
            assert "web page" in error.error, (method, path, error)
        assert snapshot(store) == before
        assert (await broker.stats("q"))["paused"] is False

    with_api(test, token=token)


@pytest.mark.parametrize("headers", [
    {"sec-fetch-site": "same-origin", "origin": URL},
    {"sec-fetch-site": "none"},  # a person typed the URL
    {"origin": "HTTP://127.0.0.1:8765"},
    {"referer": URL + "/ui/queues/q"},
    {"origin": "http://broker.example:8765", "host": "10.0.0.5:8765"},  # behind a proxy
])
def test_gate_answers_the_brokers_own_pages(headers: dict[str, str]) -> None:
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        sent = {"host": HOST, **headers}
        status, out, _ = await call(app, "GET", "/v1/queues/q/stats", token=TOKEN, headers=sent)
        assert status == 200, out
        status, out, _ = await call(app, "POST", "/v1/queues/q/pause", b"{}", token=TOKEN,
                                    headers=sent)
        assert status == 200 and (await broker.stats("q"))["paused"] is True

    with_api(test, token=TOKEN, url="http://broker.example:8765")


def test_gate_logs_a_refusal_with_its_reason_and_never_the_token(
        caplog: pytest.LogCaptureFixture) -> None:
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        status, _, _ = await call(app, "POST", "/v1/queues/q/purge", b'{"all": true}',
                                  token=TOKEN, headers={"origin": "http://evil.example"},
                                  client=("127.0.0.1", 4321))
        assert status == 403

    with caplog.at_level("WARNING", logger="osqueue.http"):
        with_api(test, token=TOKEN)
    assert "refused POST '/v1/queues/q/purge' from 127.0.0.1:4321: Origin " \
        "'http://evil.example'" in caplog.text
    assert TOKEN not in caplog.text


# -- content types ------------------------------------------------------------------

@pytest.mark.parametrize("token", [None, TOKEN])
@pytest.mark.parametrize("content_type", PAGE_TYPES + OTHER_TYPES)
def test_check_type_refuses_a_change_without_its_routes_content_type(
        content_type: str, token: str | None) -> None:
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        before = snapshot(store)
        for method, path, body in CHANGES:
            status, out, headers = await call(app, method, path, body, token=token,
                                              content_type=content_type, headers={"host": HOST})
            error = refused(status, out, "unsupported_media_type")
            assert "needs Content-Type: application/json" in error.error, (path, error)
            assert headers.get(b"connection") == b"close"  # the body was not read
        assert snapshot(store) == before
        assert (await broker.stats("q"))["paused"] is False

    with_api(test, token=token)


def test_check_type_refuses_a_change_with_no_content_type() -> None:
    """As a ``fetch(url, {method: "POST", mode: "no-cors"})`` without a body sends it."""
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        before = snapshot(store)
        for method, path, _ in CHANGES:
            status, out, _ = await call(app, method, path, content_type=None,
                                        headers={"host": HOST})
            error = refused(status, out, "unsupported_media_type")
            assert error.error.endswith("got none"), error
        assert snapshot(store) == before

    with_api(test)


def test_check_type_takes_each_routes_own_types_in_any_case_with_parameters() -> None:
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        for content_type in ("application/json", "Application/JSON",
                             "application/json; charset=utf-8", " application/json ;x=1"):
            status, out, _ = await call(app, "POST", "/v1/queues/q/push",
                                        b'{"jobs": [{"payload": 1}]}', content_type=content_type)
            assert status == 200, (content_type, out)
        for content_type in (STAGED_CONTENT_TYPE, STAGED_CONTENT_TYPE.upper() + "; charset=utf-8"):
            status, out, _ = await call(app, "POST", "/v1/queues/q/push", b"\t2\n",
                                        content_type=content_type)
            assert status == 200, (content_type, out)
        before = snapshot(store)
        # stage takes staged lines only; claim takes JSON only (as the OpenAPI document says)
        status, out, _ = await call(app, "POST", "/v1/queues/q/stage",
                                    b'{"write_id": "w/1"}\n\t3\n')
        assert refused(status, out, "unsupported_media_type").error.startswith(
            f"POST /v1/queues/{{queue}}/stage needs Content-Type: {STAGED_CONTENT_TYPE}")
        status, out, _ = await call(app, "POST", "/v1/queues/q/claim", b'{"worker": "w"}',
                                    content_type=STAGED_CONTENT_TYPE)
        refused(status, out, "unsupported_media_type")
        assert snapshot(store) == before
        status, _, _ = await call(app, "POST", "/v1/queues/q/stage",
                                  b'{"write_id": "w/1"}\n\t3\n', content_type=STAGED_CONTENT_TYPE)
        assert status == 200

    with_api(test)


def test_a_read_needs_no_content_type() -> None:
    async def test(broker: Broker, app: App, store: ObjectStore) -> None:
        for method, path in READS:
            status, out, _ = await call(app, method, path, content_type="text/plain")
            assert status == 200, (path, out)

    with_api(test)


# -- the rules' parts ---------------------------------------------------------------

def test_is_loopback_and_host_name() -> None:
    assert [is_loopback(h) for h in ("localhost", "localhost.", "LocalHost", "127.0.0.1",
                                     "127.255.0.1", "::1", "[::1]", "::ffff:127.0.0.1")] == \
        [True] * 8
    assert not any(is_loopback(h) for h in ("localhost.evil.example", "evil.example",
                                            "0.0.0.0", "::", "10.0.0.1", "::ffff:10.0.0.1",
                                            "", "127.0.0.1.", "2130706433"))
    assert [host_name(h) for h in ("[::1]:8765", "LocalHost:80", "a.example", "[bad", "")] == \
        ["::1", "localhost", "a.example", "", ""]


def test_gate_remembers_only_a_bounded_number_of_accepted_hosts() -> None:
    gate = Gate("http://10.0.0.5:8765", any_host=False)
    for port in range(1000):
        assert gate.host_allowed(f"127.0.0.1:{port}".encode())
        assert not gate.host_allowed(f"evil{port}.example:8765".encode())
    assert len(gate._hosts) <= KNOWN_HOSTS
    assert gate.host_allowed(b"10.0.0.5:1") and not gate.host_allowed(b"10.0.0.6:8765")


def test_gate_logs_at_most_one_refusal_a_minute_and_counts_the_rest(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    gate = Gate(URL, any_host=False, monotonic=lambda: now[0])
    scope = {"method": "POST", "path": "/v1/queues/q/purge", "client": ("127.0.0.1", 5),
             "headers": [(b"host", b"127.0.0.1:8765"), (b"origin", b"http://evil.example")]}
    with caplog.at_level("WARNING", logger="osqueue.http"):
        for step in range(300):
            now[0] = 1000.0 + step * LOG_EVERY_S / 200
            with pytest.raises(Forbidden):
                gate.check(scope)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].endswith("Origin 'http://evil.example'")
    assert lines[1].endswith("Origin 'http://evil.example'; 199 more refused since the last "
                             "such line")
