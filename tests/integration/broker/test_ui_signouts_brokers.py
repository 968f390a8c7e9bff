"""A dashboard sign-out holds on every broker of the store and after a restart:
real broker processes over real sockets, on a file store and on S3 (moto's
server on loopback).

A person signs in on broker A, and broker B (same store, same token) accepts the
session; they sign out on A. The old cookie, with its old CSRF token, is then
refused on B, and on A once restarted, and the queue it tried to pause is
byte-identical afterwards; a new session on the same broker pauses it (the
refusal was the sign-out's, not the broker's).
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from urllib.parse import urlencode

import urllib3

from broker import paths
from broker.storage import ObjectStore, store_from_url
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess

TOKEN = "signout-test-token-1c9e77"
FORM = "application/x-www-form-urlencoded"


def broker(store: str) -> BrokerProcess:
    # a lease of an hour: no renewal writes while a test compares the queue's object
    return BrokerProcess(store, "--token-env", "OSQ_SIGNOUT_TOKEN", "--lease-s", "3600",
                         "--log-level", "info", env={"OSQ_SIGNOUT_TOKEN": TOKEN})


def request(method: str, url: str, cookie: str | None = None,
            fields: dict[str, str] | None = None) -> urllib3.BaseHTTPResponse:
    origin = re.match(r"https?://[^/]+", url)
    assert origin is not None
    headers = {"origin": origin.group(0)}
    if cookie is not None:
        headers["cookie"] = f"osq_ui={cookie}"
    body = None
    if fields is not None:
        headers["content-type"] = FORM
        body = urlencode(fields).encode()
    return urllib3.request(method, url, body=body, headers=headers, retries=False,
                           redirect=False)


def sign_in(proc: BrokerProcess) -> str:
    answer = request("POST", f"{proc.url}/ui/login", fields={"token": TOKEN, "next": "/ui/"})
    assert answer.status == 303, answer.data[:300]
    found = re.match(r"osq_ui=([^;]+)", answer.headers["set-cookie"])
    assert found is not None
    return found.group(1)


def csrf_on(proc: BrokerProcess, cookie: str, queue: str) -> str:
    answer = request("GET", f"{proc.url}/ui/queues/{queue}", cookie)
    assert answer.status == 200, answer.data[:300]
    found = re.search(rb'name="csrf" value="([^"]+)"', answer.data)
    assert found is not None
    return found.group(1).decode()


def queue_object(store: ObjectStore, queue: str) -> bytes:
    return bytes(store.read(paths.state_key(queue)).data)


def check_sign_out_lasts(store_url: str) -> None:
    store = store_from_url(store_url)
    qa, qb = f"qa-{uuid.uuid4().hex[:6]}", f"qb-{uuid.uuid4().hex[:6]}"
    a = broker(store_url).start()
    b = None
    try:
        b = broker(store_url).start()
        QueueClient(a.url, qa, token=TOKEN).push({"n": 1})
        QueueClient(b.url, qb, token=TOKEN).push({"n": 2})  # each broker serves one
        cookie = sign_in(a)
        old_csrf = csrf_on(b, cookie, qb)  # B accepts A's session
        sign_out = request("POST", f"{a.url}/ui/logout", cookie,
                           {"csrf": csrf_on(a, cookie, qa)})
        assert sign_out.status == 303 and "Max-Age=0" in sign_out.headers["set-cookie"]

        before = queue_object(store, qb)
        refused = request("POST", f"{b.url}/ui/queues/{qb}/pause", cookie, {"csrf": old_csrf})
        assert refused.status == 401, refused.data[:300]
        assert queue_object(store, qb) == before
        page = request("GET", f"{b.url}/ui/queues/{qb}", cookie)
        assert page.status == 303 and page.headers["location"].startswith("/ui/login")
        fresh = sign_in(b)
        done = request("POST", f"{b.url}/ui/queues/{qb}/pause", fresh,
                       {"csrf": csrf_on(b, fresh, qb)})
        assert done.status == 303 and queue_object(store, qb) != before

        b.stop()
        b = None
        a.stop()
        first = a.output
        assert "signed out (session s-" in first and cookie not in first
        a = broker(store_url).start()  # A again: it serves both queues now
        before = queue_object(store, qa)
        refused = request("POST", f"{a.url}/ui/queues/{qa}/pause", cookie, {"csrf": old_csrf})
        assert refused.status == 401, refused.data[:300]
        assert queue_object(store, qa) == before
        fresh = sign_in(a)
        done = request("POST", f"{a.url}/ui/queues/{qa}/pause", fresh,
                       {"csrf": csrf_on(a, fresh, qa)})
        assert done.status == 303 and queue_object(store, qa) != before
        assert cookie not in a.output
    finally:
        if b is not None:
            b.stop()
        a.stop()


def test_a_sign_out_lasts_on_a_file_store(tmp_path: Path) -> None:
    check_sign_out_lasts(f"file://{tmp_path}")


def test_a_sign_out_lasts_on_s3(s3_url: str) -> None:
    check_sign_out_lasts(s3_url)
