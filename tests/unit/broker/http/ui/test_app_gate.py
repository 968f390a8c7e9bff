"""The dashboard's gate (broker.http.ui.app) through the broker's ASGI app, in
process, over a memory store: sign-in, CSRF, the origin check, read-only, the
loopback rule of a broker without a token, and the log line of each action.

Every refused POST leaves the store byte-identical (each object's bytes and
etag compared before and after) and logs no action.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlencode

import pytest

from broker.http.app import build_app
from broker.storage import MemoryStore
from tests.support.asgi import call
from tests.support.inprocess import run, started
from tests.support.store_files import snapshot
from tests.support.ui_forms import (
    FORM,
    ORIGIN,
    TOKEN,
    URL,
    cookie_of,
    csrf,
    dashboard,
    login,
    post,
    told,
)


def test_a_page_without_a_session_goes_to_the_login_form() -> None:
    async def main() -> None:
        async with dashboard() as (_, app, _):
            status, _, headers = await call(app, "GET", "/ui/queues/q", query="status=dead")
            assert status == 303
            assert headers[b"location"] == b"/ui/login?next=/ui/queues/q%3Fstatus%3Ddead"
            status, _, headers = await call(app, "GET", "/ui/queues/q/summary",
                                            headers={"hx-request": "true"})
            assert status == 401 and headers[b"hx-redirect"].startswith(b"/ui/login")
            status, _, _ = await call(app, "GET", "/ui/queues/q/history.json")
            assert status == 303
            status, body, _ = await call(app, "GET", "/ui/login")
            assert status == 200 and b'name="token"' in body
            status, _, _ = await call(app, "GET", "/ui/static/htmx.min.js")
            assert status == 200  # public: the login page needs it

    run(main())


def test_a_wrong_token_is_refused_and_logged_without_it(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with dashboard() as (_, app, _):
            status, body, headers = await call(
                app, "POST", "/ui/login", urlencode({"token": TOKEN[:-1]}).encode(),
                content_type=FORM, headers=ORIGIN)
            assert status == 401 and b"Wrong token" in body
            assert b"set-cookie" not in headers
            status, _, _ = await call(app, "GET", "/ui/", token="wrong")
            assert status == 401

    with caplog.at_level(logging.INFO):
        run(main())
    assert "refused login" in caplog.text
    assert TOKEN[:-1] not in caplog.text and TOKEN not in caplog.text


def test_signing_in_sets_an_http_only_strict_cookie_without_the_token() -> None:
    async def main() -> None:
        async with dashboard() as (_, app, _):
            status, _, headers = await call(
                app, "POST", "/ui/login",
                urlencode({"token": TOKEN, "next": "/ui/queues/q"}).encode(),
                content_type=FORM, headers=ORIGIN)
            assert status == 303 and headers[b"location"] == b"/ui/queues/q"
            set_cookie = headers[b"set-cookie"].decode()
            assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
            assert TOKEN not in set_cookie
            cookie = cookie_of(headers)
            status, body, headers = await call(app, "GET", "/ui/",
                                               headers={"cookie": f"osq_ui={cookie}"})
            assert status == 200 and b'data-queue="q"' in body
            assert b"script-src 'self'" in headers[b"content-security-policy"]
            assert headers[b"x-frame-options"] == b"DENY"
            # a login form sent from another site is refused
            status, _, headers = await call(
                app, "POST", "/ui/login", urlencode({"token": TOKEN}).encode(),
                content_type=FORM, headers={**ORIGIN, "origin": "http://evil.example"})
            assert status == 403 and b"set-cookie" not in headers
            # never sent on to another site after signing in
            status, _, headers = await call(
                app, "POST", "/ui/login",
                urlencode({"token": TOKEN, "next": "//evil.example/"}).encode(),
                content_type=FORM, headers=ORIGIN)
            assert headers[b"location"] == b"/ui/"

    run(main())


def test_a_post_without_its_csrf_token_or_from_another_origin_is_refused(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with dashboard() as (broker, app, store):
            cookie, other = await login(app), await login(app)
            token, others = await csrf(app, cookie), await csrf(app, other)
            assert token != others
            before = snapshot(store)
            refusals: list[tuple[dict[str, Any], dict[str, str]]] = [
                ({}, {}),  # no token
                ({"csrf": "0" * 32}, {}),  # a made-up one
                ({"csrf": others}, {}),  # another session's
                ({"csrf": token}, {"origin": "http://evil.example"}),
                ({"csrf": token}, {"origin": "null"}),
                ({"csrf": token}, {"origin": "", "referer": "http://evil.example/x"}),
            ]
            for fields, headers in refusals:
                if headers.get("origin") == "":
                    headers = {"referer": headers["referer"]}
                    sent = {"host": "127.0.0.1:8765", **headers}
                    status, body, _ = await call(
                        app, "POST", "/ui/queues/q/pause", urlencode(fields).encode(),
                        content_type=FORM, headers={**sent, "cookie": f"osq_ui={cookie}"})
                else:
                    status, body, _ = await post(app, "/ui/queues/q/pause", fields, cookie,
                                                 headers)
                assert status == 403, (fields, headers, body[:200])
                assert snapshot(store) == before
            assert (await broker.stats("q"))["paused"] is False
            status, _, headers = await post(app, "/ui/queues/q/pause", {"csrf": token}, cookie)
            assert status == 303 and headers[b"location"] == b"/ui/queues/q"
            assert await told(app, cookie, headers) == \
                "Paused: no job is handed out until resumed."
            assert (await broker.stats("q"))["paused"] is True

    with caplog.at_level(logging.INFO, logger="osqueue.ui"):
        run(main())
    actions = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ui action")]
    assert len(actions) == 1
    assert re.fullmatch(r"ui action pause queue=q by=127\.0\.0\.1:1 \(token holder, "
                        r"session s-[0-9a-f]{8}\)", actions[0]), actions


def test_read_only_hides_every_action_and_refuses_it(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with dashboard(read_only=True) as (_, app, store):
            cookie = await login(app)
            status, body, _ = await call(app, "GET", "/ui/queues/q",
                                         headers={"cookie": f"osq_ui={cookie}"})
            assert status == 200 and b"read-only" in body
            for action in (b"/pause", b"/resume", b"/redrive", b"/purge"):
                assert action not in body, action
            status, body, _ = await call(app, "GET", "/ui/queues/q/jobs/j0000000001",
                                         headers={"cookie": f"osq_ui={cookie}"})
            assert status == 200 and b"redrive" not in body
            token = await csrf(app, cookie, "/ui/")  # the sign-out form still has one
            before = snapshot(store)
            for path, fields in [
                ("/ui/queues/q/pause", {}), ("/ui/queues/q/resume", {}),
                ("/ui/queues/q/redrive", {"all": "yes"}),
                ("/ui/queues/q/redrive", {"ids": "j0000000001"}),
                ("/ui/queues/q/purge", {"status": "dead", "confirm": "yes"}),
            ]:
                status, body, _ = await post(app, path, {"csrf": token, **fields}, cookie)
                assert status == 403 and b"read-only" in body, path
                assert snapshot(store) == before
            # the API itself is not read-only: the switch is the dashboard's
            status, _, _ = await call(app, "POST", "/v1/queues/q/pause", b"{}", token=TOKEN)
            assert status == 200

    with caplog.at_level(logging.INFO, logger="osqueue.ui"):
        run(main())
    assert "ui action" not in caplog.text


def test_without_a_token_the_dashboard_answers_loopback_clients_only() -> None:
    async def main() -> None:
        async with dashboard(token=None) as (broker, app, store):
            before = snapshot(store)
            for client, host in [(("10.1.2.3", 5), "127.0.0.1:8765"),
                                 (("127.0.0.1", 5), "evil.example:8765"),  # DNS rebinding
                                 (("192.168.0.9", 5), "localhost:8765")]:
                for method, path in [("GET", "/ui/"), ("GET", "/ui/static/htmx.min.js"),
                                     ("POST", "/ui/queues/q/pause")]:
                    status, body, _ = await call(app, method, path, headers={"host": host},
                                                 client=client)
                    assert status == 403 and b"only on this machine" in body, (client, host)
            assert snapshot(store) == before
            status, body, headers = await call(app, "GET", "/ui/queues/q",
                                               headers={"host": "127.0.0.1:8765"},
                                               client=("127.0.0.1", 7))
            assert status == 200 and b"/pause" in body
            cookie = cookie_of(headers)  # a session, for the CSRF token
            token = re.search(rb'name="csrf" value="([^"]+)"', body)
            assert token is not None
            status, _, _ = await post(app, "/ui/queues/q/pause", {}, cookie)
            assert status == 403
            status, _, _ = await post(app, "/ui/queues/q/pause",
                                      {"csrf": token.group(1).decode()}, cookie)
            assert status == 303 and (await broker.stats("q"))["paused"] is True

    run(main())


def test_a_bearer_header_opens_the_dashboard_to_a_script() -> None:
    async def main() -> None:
        async with dashboard() as (broker, app, _):
            status, body, _ = await call(app, "GET", "/ui/queues/q", token=TOKEN)
            assert status == 200 and b"j0000000002" in body
            status, _, _ = await call(app, "POST", "/ui/queues/q/redrive", b"all=yes",
                                      content_type=FORM, token=TOKEN)
            assert status == 303
            assert (await broker.stats("q"))["counts"]["dead"] == 0

    run(main())


def test_a_purge_needs_its_confirmation_and_a_form_sent_twice_purges_once() -> None:
    async def main() -> None:
        async with dashboard() as (broker, app, store):
            cookie = await login(app)
            status, body, _ = await call(app, "GET", "/ui/queues/q/purge", query="status=dead",
                                         headers={"cookie": f"osq_ui={cookie}"})
            assert status == 200 and b"now 1" in body
            key = re.search(rb'name="request" value="([^"]+)"', body)
            token = await csrf(app, cookie)
            assert key is not None
            before = snapshot(store)
            status, _, _ = await post(app, "/ui/queues/q/purge",
                                      {"csrf": token, "status": "dead"}, cookie)
            assert status == 422 and snapshot(store) == before
            fields = {"csrf": token, "status": "pending", "confirm": "yes",
                      "request": key.group(1).decode()}
            status, _, headers = await post(app, "/ui/queues/q/purge", fields, cookie)
            assert status == 303 and await told(app, cookie, headers) == "Purged 2 job(s)."
            await broker.push("q", [b'{"n":4}'])
            status, _, headers = await post(app, "/ui/queues/q/purge", fields, cookie)
            assert await told(app, cookie, headers) == "Purged 2 job(s)."  # the first answer
            assert (await broker.stats("q"))["counts"]["pending"] == 1  # the new job stays

    run(main())


def test_bad_query_values_and_unknown_queues_get_a_clear_page() -> None:
    async def main() -> None:
        async with dashboard() as (_, app, _):
            for query, status, text in [("status=zombie", 422, b"unknown status"),
                                        ("after=x1", 422, b"after must be a job id"),
                                        ("limit=100000", 422, b"limit must be")]:
                got, body, _ = await call(app, "GET", "/ui/queues/q", query=query, token=TOKEN)
                assert got == status and text in body, (query, body[:400])
            got, body, _ = await call(app, "GET", "/ui/queues/nope", token=TOKEN)
            assert got == 404 and b"does not exist" in body
            got, body, _ = await call(app, "GET", "/ui/queues/q/jobs/j0000000099", token=TOKEN)
            assert got == 404 and b"holds no job" in body
            got, _, _ = await call(app, "GET", "/ui/no/such/page", token=TOKEN)
            assert got == 404

    run(main())


def test_a_queue_another_broker_serves_shows_its_objects_figures_and_its_owner() -> None:
    async def main() -> None:
        store = MemoryStore()
        owner = await started(store, "javascript:alert(1)")  # a hostile record's URL
        other = await started(store, URL)
        try:
            await owner.push("far", [b"1", b"2"])
            await other.watch()  # (it lists the store at start; the queue came after)
            other.takeover.known.add("far")
            app = build_app(other, token=TOKEN)
            status, body, _ = await call(app, "GET", "/ui/", token=TOKEN)
            assert status == 200 and b"reading its object" in body
            ui = app.ui
            assert ui is not None
            await ui.dashboard.wait_standby("far")
            status, body, _ = await call(app, "GET", "/ui/fragments/queues", token=TOKEN)
            assert b'data-testid="count-far-pending">2<' in body
            assert b"javascript:" not in body.replace(b">javascript:alert(1)<", b"")
            assert b'href="#/ui/queues/far"' in body
            status, body, _ = await call(app, "GET", "/ui/queues/far", token=TOKEN)
            assert status == 200 and b"Another broker serves this queue" in body
            assert b'data-testid="browser"' not in body  # its jobs are browsed on its owner
            before = snapshot(store)
            status, body, _ = await call(app, "POST", "/ui/queues/far/pause", b"",
                                         content_type=FORM, token=TOKEN)
            assert status == 503 and b"served by" in body
            assert snapshot(store) == before
        finally:
            await other.stop(5)
            await owner.stop(5)

    run(main())
