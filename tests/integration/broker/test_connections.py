"""Slow and greedy clients against a real server on real sockets (broker.http.connections).

Each test starts a broker (file store, in a thread) with small bounds and
waits for the server to close the socket: ``recv`` returning ``b""`` is the
event; the socket's own timeout only fails a test whose bound does not hold.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from broker.http.server import BrokerServer
from broker.limits import MAX_HEADER_BYTES
from broker.service.config import BrokerConfig
from broker.storage import FileStore
from tests.support.broker_process import eventually

HEADER_S = 0.5
BODY_S = 0.5
MAX_CONNECTIONS = 4
#: How long a test waits for a close before it fails: far past every bound.
GIVE_UP_S = 10.0


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[BrokerServer]:
    config = BrokerConfig(self_test=False, header_timeout_s=HEADER_S, body_timeout_s=BODY_S,
                          max_connections=MAX_CONNECTIONS,
                          max_connections_per_address=MAX_CONNECTIONS)
    with BrokerServer(FileStore(tmp_path), config=config).start_in_thread() as s:
        yield s


def connect(server: BrokerServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.settimeout(GIVE_UP_S)
    return sock


def until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long
    that took (s)."""
    start = time.monotonic()
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    sock.close()
    return b"".join(chunks), time.monotonic() - start


def error_of(response: bytes) -> tuple[int, dict[str, str]]:
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    return int(head.split()[1]), orjson.loads(body)


def claims_begun(server: BrokerServer) -> float:
    """Claims the broker has answered internally: a long poll counts once it waits."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in server.broker.metrics.render()
               .splitlines() if line.startswith("osqueue_ops_total{") and 'op="claim"' in line)


def store_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_partial_headers_get_408_and_a_closed_connection(server: BrokerServer,
                                                         tmp_path: Path) -> None:
    sock = connect(server)
    sock.sendall(b"POST /v1/queues/q/push HTTP/1.1\r\nHost: x\r\nContent-Le")
    response, took = until_closed(sock)
    status, error = error_of(response)
    assert status == 408 and error["code"] == "request_timeout"
    assert HEADER_S * 0.8 <= took < HEADER_S + 3
    assert store_files(tmp_path) == []


def test_a_connection_that_sends_nothing_is_closed(server: BrokerServer) -> None:
    response, took = until_closed(connect(server))
    assert response == b"" and took < HEADER_S + 3


def test_a_stalled_body_gets_408_and_a_closed_connection(server: BrokerServer,
                                                         tmp_path: Path) -> None:
    sock = connect(server)
    sock.sendall(b"POST /v1/queues/q/push HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                 b'{"jobs": [{"payload": ')
    response, took = until_closed(sock)
    status, error = error_of(response)
    assert status == 408 and error["code"] == "request_timeout"
    assert BODY_S * 0.8 <= took < BODY_S + 3
    assert store_files(tmp_path) == []


def test_a_stalled_body_on_a_rest_route_gets_408(server: BrokerServer) -> None:
    sock = connect(server)
    sock.sendall(b"POST /v1/queues/q/purge HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
    response, _ = until_closed(sock)
    assert error_of(response)[0] == 408


def test_a_slow_but_steady_body_is_served(server: BrokerServer) -> None:
    """Pauses shorter than the bound, adding up to more than it: the bound is on
    each pause, not on the whole body (the sleeps are the slow client)."""
    body = b'{"jobs": [{"payload": "' + b"x" * 40 + b'"}]}'
    sock = connect(server)
    sock.sendall(b"POST /v1/queues/q/push HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    pieces = [body[i:i + 10] for i in range(0, len(body), 10)]
    for piece in pieces:
        time.sleep(BODY_S / 3)
        sock.sendall(piece)
    assert len(pieces) * BODY_S / 3 > BODY_S
    response, _ = until_closed(sock)
    assert response.startswith(b"HTTP/1.1 200"), response


def test_headers_past_the_limit_get_431(server: BrokerServer) -> None:
    sock = connect(server)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * MAX_HEADER_BYTES)
    response, _ = until_closed(sock)
    status, error = error_of(response)
    assert status == 431 and error["code"] == "headers_too_large"


def test_a_request_that_is_not_http_gets_a_json_400(server: BrokerServer) -> None:
    sock = connect(server)
    sock.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
    response, _ = until_closed(sock)
    status, error = error_of(response)
    assert status == 400 and error["code"] == "bad_request"


def test_connections_past_the_limit_get_503_and_are_closed(server: BrokerServer) -> None:
    """Every connection busy (a long-poll claim each): there is nothing to shed
    (broker.http.admission), so one more is refused."""
    create = (b'PUT /v1/queues/q HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
              b'Content-Length: 2\r\n\r\n{}')
    sock = connect(server)
    sock.sendall(create)
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    sock.close()
    claim = b'{"worker": "w", "wait_s": 30}'
    held = []
    for _ in range(MAX_CONNECTIONS):
        sock = connect(server)
        sock.sendall(b"POST /v1/queues/q/claim HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(claim), claim))
        held.append(sock)
    eventually(lambda: claims_begun(server) >= MAX_CONNECTIONS, GIVE_UP_S,
               "every long poll to begin waiting")
    response, _ = until_closed(connect(server))
    status, error = error_of(response)
    assert status == 503 and error["code"] == "broker_unavailable"
    held.pop().close()  # one fewer: a new connection is served again (once the close is seen)
    deadline = time.monotonic() + GIVE_UP_S
    while True:
        sock = connect(server)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        response, _ = until_closed(sock)
        if response.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
            break
    assert response.startswith(b"HTTP/1.1 200")
    for sock in held:
        sock.close()


@pytest.mark.parametrize("path", ["/v1/queues/q/push", "/v1/queues/q/purge"])
def test_a_body_refused_unread_closes_the_connection(tmp_path: Path, path: str) -> None:
    """413 for a declared length past the limit, before any of the body: the
    connection closes then (not at the body timeout, an hour here), so the body
    is not received for nothing."""
    config = BrokerConfig(self_test=False, body_timeout_s=3600, max_request_bytes=1024)
    with BrokerServer(FileStore(tmp_path), config=config).start_in_thread() as server:
        sock = connect(server)
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode() +
                     b"Content-Type: application/json\r\nContent-Length: 10485760\r\n\r\n")
        response, _ = until_closed(sock)
    status, error = error_of(response)
    assert status == 413 and error["code"] == "payload_too_large"
