"""What any client can send is logged at most one line a minute per kind
(broker.http.connections.Quiet), on real sockets against a broker in a thread.

Before, each of these wrote a warning line of its own, so a web page (a loop
of ``new WebSocket(...)`` or of ``no-cors`` form posts) or a neighbour on the
network wrote as many lines into the broker's log as it liked: uvicorn's
"Invalid HTTP request received." for bytes that are not HTTP (a TLS hello),
its two lines for every ``Upgrade: websocket`` request, and the dashboard's
refusals of a cross-origin login or form and of a missing CSRF token. The
refusals themselves are unchanged (400, 403), and the store with them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.http.server import BrokerServer
from broker.service.config import BrokerConfig
from broker.storage import FileStore
from tests.support.sockets import ask, connect, until_closed

TOKEN = "refusal-logs-token-0123456789"
TIMES = 25


@pytest.fixture(params=["token", "no token"])
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerServer]:
    token = TOKEN if request.param == "token" else None
    with BrokerServer(FileStore(tmp_path), token=token,
                      config=BrokerConfig(self_test=False)).start_in_thread() as s:
        yield s


def snapshot(root: Path) -> list[tuple[str, bytes]]:
    store = FileStore(root)
    return [(key, bytes(store.read(key).data)) for key in sorted(store.list(""))]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_flood_of_refused_requests_writes_a_few_lines(
        server: BrokerServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    assert ask(server.port, "PUT", "/v1/queues/q", b"{}", token=TOKEN).status == 200
    before = snapshot(tmp_path)
    foreign = {"Origin": "http://evil.example", "Content-Type":
               "application/x-www-form-urlencoded"}
    statuses = []
    for _ in range(TIMES):
        with connect(server.port) as sock:  # a TLS hello, not HTTP
            sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            assert until_closed(sock).startswith(b"HTTP/1.1 400 ")
        statuses.append(ask(server.port, "GET", "/v1/queues", headers={
            "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", **foreign}).status)
        statuses.append(ask(server.port, "POST", "/ui/login", b"token=guess",
                            headers=foreign).status)
        statuses.append(ask(server.port, "POST", "/ui/queues/q/pause", b"csrf=x",
                            headers=foreign).status)
        statuses.append(ask(server.port, "POST", "/ui/queues/q/pause", b"csrf=x",
                            headers={"Content-Type": foreign["Content-Type"]}).status)
    assert set(statuses) <= {303, 401, 403} and 403 in statuses, statuses  # (303: no login)
    assert snapshot(tmp_path) == before
    lines = warnings(caplog)
    # one line a kind at most (not TIMES): not HTTP, an upgrade asked for (with
    # uvicorn's note about websockets), the gate, a cross-origin login or form,
    # a missing CSRF token
    assert len(lines) <= 7, "\n".join(lines)
