"""Driving the dashboard's forms in process, as a browser would: sign-in, the
CSRF field of a page, a POST from the dashboard's origin, the notice an action
leaves (for the tests of broker.http.ui and of sign-outs).

``dashboard()`` is a broker over a memory store with queue ``q`` (two pending
jobs, one dead) and its ASGI app, gated by :data:`TOKEN`.
"""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode

from broker.http.app import App, build_app
from broker.model.ops import FailItem
from broker.service.broker import Broker
from broker.storage import MemoryStore, ObjectStore
from tests.support.asgi import call
from tests.support.inprocess import started

TOKEN = "ui-gate-test-token-0123456789"
URL = "http://127.0.0.1:8765"
ORIGIN = {"origin": URL, "host": "127.0.0.1:8765"}
FORM = "application/x-www-form-urlencoded"


@asynccontextmanager
async def dashboard(token: str | None = TOKEN, *, read_only: bool = False
                    ) -> AsyncIterator[tuple[Broker, App, ObjectStore]]:
    """A broker with queue ``q`` (two pending jobs, one dead) and its app."""
    store = MemoryStore()
    broker = await started(store, URL, ui_read_only=read_only)
    try:
        await broker.create_queue("q", {"max_attempts": 1})
        await broker.push("q", [b'{"n":1}', b'{"n":2}', b'{"n":3}'])
        claimed = await broker.claim("q", "w")
        await broker.fail("q", [FailItem(claimed[0].token, "boom", None)])
        yield broker, build_app(broker, token=token), store
    finally:
        await broker.stop(5)


def cookie_of(headers: dict[bytes, bytes]) -> str:
    found = re.match(r"osq_ui=([^;]*)", headers[b"set-cookie"].decode())
    assert found is not None
    return found.group(1)


async def login(app: App) -> str:
    status, _, headers = await call(app, "POST", "/ui/login",
                                    urlencode({"token": TOKEN, "next": "/ui/"}).encode(),
                                    content_type=FORM, headers=ORIGIN)
    assert status == 303, status
    return cookie_of(headers)


async def csrf(app: App, cookie: str, path: str = "/ui/queues/q") -> str:
    status, body, _ = await call(app, "GET", path, headers={"cookie": f"osq_ui={cookie}"})
    assert status == 200, body[:300]
    found = re.search(rb'name="csrf" value="([^"]+)"', body)
    assert found is not None
    return found.group(1).decode()


async def post(app: App, path: str, fields: dict[str, Any], cookie: str | None,
               headers: dict[str, str] | None = None,
               client: tuple[str, int] = ("127.0.0.1", 1)) -> tuple[int, bytes, dict[bytes, bytes]]:
    sent = {**ORIGIN, **(headers or {})}
    if cookie is not None:
        sent["cookie"] = f"osq_ui={cookie}"
    return await call(app, "POST", path, urlencode(fields, doseq=True).encode(),
                      content_type=FORM, headers=sent, client=client)


async def told(app: App, cookie: str, headers: dict[bytes, bytes]) -> str | None:
    """The notice on the page an action's answer (``headers``) sends the browser to,
    fetched as a browser would: with the notice cookie the answer set."""
    notice = re.match(r"osq_notice=([^;]*)", headers[b"set-cookie"].decode())
    assert notice is not None
    path, _, query = headers[b"location"].decode().partition("?")
    status, body, answer = await call(
        app, "GET", path, query=query,
        headers={"cookie": f"osq_ui={cookie}; osq_notice={notice.group(1)}"})
    assert status == 200, body[:300]
    assert answer[b"set-cookie"].startswith(b"osq_notice=;")  # shown once: cleared
    found = re.search(rb'data-testid="done">([^<]*)<', body)
    return None if found is None else html.unescape(found.group(1).decode())
