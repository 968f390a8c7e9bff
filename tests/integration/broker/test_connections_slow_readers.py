"""A client that reads none of its answers cannot hold a connection for ever
(broker.http.connections: the send stall bound), on real sockets.

The attackers hold no token. Each of their connections pipelines many
requests for a public answer (``GET /openapi.json``) and reads nothing, with
a receive buffer of 1 KiB: the broker's buffer for the connection fills and
the next answer waits for room. Such a connection is busy (a request is being
answered), and busy connections are never shed, so two addresses at their
share held every connection of the broker, token holders' included, for as
long as they liked. Now a connection whose buffer stays full for
``body_timeout_s`` is dropped.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from broker.http.server import BrokerServer
from broker.service.config import BrokerConfig
from broker.storage import FileStore
from tests.support.broker_process import eventually
from tests.support.sockets import Answer, ask

TOKEN = "slow-readers-token-0123456789"
ATTACKERS = ("127.0.0.2", "127.0.0.3")
WORKER = "127.0.0.1"


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[BrokerServer]:
    """A broker with a token, 10 connections, 5 per address, a body (and send)
    stall bound of 1 s, and a header timeout long enough not to matter."""
    config = BrokerConfig(self_test=False, max_connections=10, body_timeout_s=1.0,
                          header_timeout_s=30.0)
    with BrokerServer(FileStore(tmp_path), token=TOKEN, config=config).start_in_thread() as s:
        yield s


def snapshot(root: Path) -> list[tuple[str, bytes]]:
    store = FileStore(root)
    return [(key, bytes(store.read(key).data)) for key in sorted(store.list(""))]


def slow_reader(port: int, source: str, last: bytes) -> socket.socket:
    """A connection from ``source`` that asks for the OpenAPI document 200 times in
    one go and reads none of it; ``last``: the last request's extra header lines."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(20.0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    ask_once = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    sock.sendall((ask_once + b"\r\n") * 199 + ask_once + last + b"\r\n")
    return sock


def push(port: int) -> Answer:
    return ask(port, "POST", "/v1/queues/q/push", orjson.dumps({"jobs": [{"payload": 1}]}),
               source=WORKER, token=TOKEN)


@pytest.mark.parametrize("last", [b"", b"Connection: close\r\n"],
                         ids=["kept alive", "closed after the last answer"])
def test_connections_that_read_none_of_their_answers_are_dropped(
        server: BrokerServer, tmp_path: Path, last: bytes) -> None:
    assert push(server.port).status == 200
    before = snapshot(tmp_path)
    held = [slow_reader(server.port, source, last) for source in ATTACKERS for _ in range(5)]
    try:
        book = server.connections
        assert book is not None
        # every connection of the broker is the attackers', each busy answering
        eventually(lambda: len(book) == 10 and all(
            book.state(c) == "busy" for c in list(book._address)),
            timeout_s=10, what="the attackers' ten connections busy")
        # their buffers stay full: each is dropped within the stall bound, and a
        # token holder's push is answered (before: 503 for as long as they held on)
        eventually(lambda: sum(book.count(a) for a in ATTACKERS) == 0, timeout_s=10,
                   what="the slow readers dropped")
        assert snapshot(tmp_path) == before  # they changed nothing
        answer = push(server.port)
        assert answer.status == 200, answer
    finally:
        for sock in held:
            sock.close()
