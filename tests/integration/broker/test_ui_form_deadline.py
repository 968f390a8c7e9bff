"""The dashboard reads a form whole within the header timeout (broker.http.ui.app),
so the login form cannot hold a connection for a token-less client, on real sockets.

The login form is the one request of a broker with a token whose body is read
before anything is checked (its body holds the token). A connection whose
request is being read is busy, and busy connections are never shed: clients
without the token that sent a login's headers and then its body a byte at a
time, each byte inside ``--body-timeout-s``, held every connection of the
broker from two addresses, and token holders got 503 for as long as they
kept on. Now a form must arrive whole within ``--header-timeout-s`` of its
headers (408, connection closed).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from broker.http.server import BrokerServer
from broker.service.config import BrokerConfig
from broker.storage import FileStore
from tests.support.broker_process import eventually
from tests.support.sockets import Answer, ask, connect, until_closed

TOKEN = "form-deadline-token-0123456789"
ATTACKERS = ("127.0.0.2", "127.0.0.3")
WORKER = "127.0.0.1"
LOGIN_HEAD = (b"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/x-www-form-urlencoded\r\n"
              b"Content-Length: 60000\r\n\r\ntoken=")


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[BrokerServer]:
    """A broker with a token, 10 connections, 5 per address, a header timeout of
    1 s and the default pause within a body (30 s)."""
    config = BrokerConfig(self_test=False, max_connections=10, header_timeout_s=1.0)
    with BrokerServer(FileStore(tmp_path), token=TOKEN, config=config).start_in_thread() as s:
        yield s


def snapshot(root: Path) -> list[tuple[str, bytes]]:
    store = FileStore(root)
    return [(key, bytes(store.read(key).data)) for key in sorted(store.list(""))]


def push(port: int) -> Answer:
    return ask(port, "POST", "/v1/queues/q/push", orjson.dumps({"jobs": [{"payload": 1}]}),
               source=WORKER, token=TOKEN)


def trickle(socks: list[socket.socket], stop: threading.Event) -> None:
    """Send one more byte of each login's body every 0.2 s until ``stop``."""
    while not stop.wait(0.2):
        for sock in socks:
            try:
                sock.send(b"a")
            except OSError:  # closed by the broker
                pass


def test_a_login_form_sent_a_byte_at_a_time_cannot_hold_the_broker(
        server: BrokerServer, tmp_path: Path) -> None:
    assert push(server.port).status == 200
    before = snapshot(tmp_path)
    held = [connect(server.port, source) for source in ATTACKERS for _ in range(5)]
    stop = threading.Event()
    sender = threading.Thread(target=trickle, args=(held, stop), daemon=True)
    try:
        for sock in held:
            sock.sendall(LOGIN_HEAD)
        sender.start()
        book = server.connections
        assert book is not None
        eventually(lambda: sum(book.count(a) for a in ATTACKERS) == 0, timeout_s=10,
                   what="the slow login forms answered and closed")
        answers = [until_closed(sock) for sock in held]
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers[:2]
        assert snapshot(tmp_path) == before
        answer = push(server.port)
        assert answer.status == 200, answer
    finally:
        stop.set()
        if sender.is_alive():
            sender.join()
        for sock in held:
            sock.close()
