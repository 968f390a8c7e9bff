"""A relay on loopback in front of a real broker that can lose one answer the
way a broker killed right after a commit loses it: the call is forwarded and
lands, its caller gets the connection closed instead of the answer, and for a
while nothing listens on the relay's port (connections are refused), then it
listens again on the same port and forwards as before.

The client under test talks to :attr:`BrokerRelay.url` as if it were the
broker's; the broker's own URL stays usable directly (a Spark task staging
through one URL, a driver publishing through another).
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tests.support.serving import ThreadedServer

#: Headers that describe one hop, not the message (never forwarded as they are).
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "te",
                  "trailer", "upgrade", "proxy-connection"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    relay: BrokerRelay


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _relay(self) -> None:
        relay = self.server.relay
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        conn = http.client.HTTPConnection(relay.upstream_host, relay.upstream_port, timeout=120)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP:
                    conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        down_s = relay.take_cut(self.command, self.path)
        if down_s is not None:
            relay.lose(self.connection, resp.status, down_s)
            self.close_connection = True
            return
        self.send_response_only(resp.status, resp.reason)
        for name, value in resp.getheaders():
            if name.lower() not in _HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _relay


class BrokerRelay:
    """Forwards HTTP on ``127.0.0.1:port`` to ``upstream`` (a broker's URL).

    :meth:`cut_next` arms it: the next request whose method is ``method`` and
    whose path ends with ``path_end`` is forwarded and answered upstream, then
    the relay stops listening, closes that connection unanswered, and listens
    again ``down_s`` seconds later. :attr:`lost` is set once the answer was
    lost; :attr:`lost_status` is the status the broker gave it;
    :attr:`back` is set once the relay listens again.
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self._lock = threading.Lock()
        self._cut: tuple[str, str, float] | None = None
        self.lost = threading.Event()
        self.back = threading.Event()
        self.lost_status: int | None = None
        self.lost_at: float | None = None  # time.monotonic() of the loss
        self._stopped = False
        self._serving = self._listen(0)
        self.port = self._serving.port
        self.url = f"http://127.0.0.1:{self.port}"

    def _listen(self, port: int) -> ThreadedServer:
        server = _Server(("127.0.0.1", port), _Handler)
        server.relay = self
        return ThreadedServer(server, f"relay-{port}").start()

    def cut_next(self, method: str, path_end: str, down_s: float) -> None:
        with self._lock:
            self._cut = (method, path_end, down_s)

    def take_cut(self, method: str, path: str) -> float | None:
        """The down time if this request is the one to lose the answer of (disarmed
        then), else None."""
        with self._lock:
            cut = self._cut
            if cut is None or cut[0] != method or not path.split("?", 1)[0].endswith(cut[1]):
                return None
            self._cut = None
            return cut[2]

    def lose(self, conn: socket.socket, status: int, down_s: float) -> None:
        """Stop listening, drop ``conn`` unanswered, listen again after ``down_s``."""
        with self._lock:
            self._serving.stop()  # refused from now on (stopped from this handler's thread)
            self.lost_status, self.lost_at = status, time.monotonic()
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.lost.set()
        threading.Timer(down_s, self._relisten).start()

    def _relisten(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._serving = self._listen(self.port)
        self.back.set()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._serving.stop()

    def __enter__(self) -> BrokerRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
