"""Raw HTTP/1.1 clients on real sockets, from a chosen loopback address.

Linux routes all of 127/8 to the loopback interface, so a socket bound to
``127.0.0.2`` before it connects is another client address to the broker:
the connection-limit tests play an attacker there and a worker on
``127.0.0.1``. Every socket has a timeout, so a test whose bound does not hold
fails instead of hanging.
"""

from __future__ import annotations

import resource
import socket
from collections.abc import Mapping
from typing import Any

import orjson

#: How long a socket waits for the server before the test fails (s).
GIVE_UP_S = 20.0


def raise_fd_limit(wanted: int) -> None:
    """Raise this process's soft limit on open files to ``wanted`` (if the hard
    limit allows it; else as far as it goes)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


def connect(port: int, source: str = "127.0.0.1", timeout_s: float = GIVE_UP_S
            ) -> socket.socket:
    """A TCP connection to ``127.0.0.1:port`` from ``source``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def request_bytes(method: str, path: str, body: bytes = b"", *, token: str | None = None,
                  headers: Mapping[str, str] | None = None, close: bool = False) -> bytes:
    """One HTTP/1.1 request (with a body, the JSON content type unless ``headers``
    give one)."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if body and not any(k.lower() == "content-type" for k in headers or {}):
        lines.append("Content-Type: application/json")
    lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Answer:
    """A parsed HTTP answer: ``status``, lower-cased ``headers``, ``body``."""

    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        first, *rest = head.decode("latin-1").split("\r\n")
        self.status = int(first.split()[1])
        self.headers: dict[str, list[str]] = {}
        for line in rest:
            name, _, value = line.partition(":")
            self.headers.setdefault(name.strip().lower(), []).append(value.strip())

    def header(self, name: str) -> str | None:
        values = self.headers.get(name)
        return values[-1] if values else None

    def json(self) -> Any:
        return orjson.loads(self.body)

    def __repr__(self) -> str:
        return f"Answer({self.status}, {self.body[:200]!r})"


def read_answer(sock: socket.socket) -> Answer:
    """Read one whole answer (by its Content-Length) from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a whole answer: {data[:200]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the whole body")
        body += chunk
    return Answer(head + b"\r\n\r\n" + body)


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (then closed here)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    sock.close()
    return b"".join(chunks)


def ask(port: int, method: str, path: str, body: bytes = b"", *, source: str = "127.0.0.1",
        token: str | None = None, headers: Mapping[str, str] | None = None) -> Answer:
    """One request on a new connection from ``source``, closed after its answer."""
    with connect(port, source) as sock:
        sock.sendall(request_bytes(method, path, body, token=token, headers=headers,
                                   close=True))
        return read_answer(sock)
