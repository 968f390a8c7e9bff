"""An HTTP reverse proxy in front of an S3 API (moto) that injects seeded faults (it
forwards any HTTP, so it also stands in front of Azurite: only the error bodies are S3's).

Point an S3 client (the broker: ``s3://bucket/prefix?endpoint=http://127.0.0.1:PORT``)
at the proxy instead of the server. Each storage request draws from one
``random.Random(seed)``; with probability ``rate`` it is faulted, the kind
picked by weight among the kinds that apply to its method:

``error500`` / ``error503`` / ``error403``
    answer ``500 InternalError`` / ``503 SlowDown`` / ``403 AccessDenied`` (an S3
    XML error body; 403 has no default weight) WITHOUT forwarding: nothing
    reached the store.
``error``
    (weight 0 unless set) answer ``error_status`` with the S3 error code
    ``error_code`` (``403 AccessDenied``, ``301 PermanentRedirect``,
    ``429 TooManyRequests``...) WITHOUT forwarding, in the same XML body.
``drop``
    (only for ``drop_methods``, by default PUT, conditional or not) forward
    the request, let it land, then close the client's connection without an
    answer: the client sees a connection error although the write happened.
    Counted as ``drop_landed`` (the server answered 2xx) or ``drop_refused``
    (it answered otherwise, e.g. 412).
``delay``
    hold the request ``delay_s`` seconds (make it longer than the client's
    read timeout: the broker's S3 client gives up after 10 s), then forward it
    (``delay_forward``: it may land after the client gave up and retried) or
    drop it unsent (``delay_drop``); ``delay_then`` = forward, drop or mixed
    (a seeded coin per request).

A **storm** (:meth:`FaultProxy.storm`, :mod:`tests.support.faultproxy.storm`)
faults every request for a while, whatever ``rate`` says (``stats()["storm"]``).

``limit`` (None: no limit) is how many more requests a draw may fault (a storm ignores it): with
``rate=1.0`` and ``limit=2``, exactly the next two storage requests are.

Faults can be switched off ("heal") and on at run time: in-process through
:meth:`FaultProxy.set_enabled` / :meth:`FaultProxy.heal`, or through the
control endpoint under ``/__faultproxy__/`` (no S3 bucket name can start
with an underscore, so it never shadows a storage request)::

    GET  /__faultproxy__/stats     counters (JSON)
    POST /__faultproxy__/heal      faults off
    POST /__faultproxy__/break     faults on
    POST /__faultproxy__/config    JSON body with any of rate, weights, delay_s,
                                   delay_then, drop_methods, enabled, error_status,
                                   error_code, limit
    POST /__faultproxy__/reset     zero the counters
    POST /__faultproxy__/storm     JSON body: kinds, and any of seconds, count, methods

``request_log`` (``--log-requests PATH``) appends one JSON line per storage
request: ``t`` (epoch s), ``dt`` (s spent), ``n``, ``m`` (method), ``path``,
``cond`` (if-match / if-none-match / null), ``bytes``, ``fault`` and ``status``
(what the server answered, null if it was not asked).

Counters: ``requests`` (storage requests proxied, control calls excluded),
``by_method``, ``faults`` by kind, ``faulted`` (their total) and
``upstream_errors`` (the server could not be reached; answered 502).

Bodies are read whole (Content-Length or chunked; several MB is fine) and
forwarded with a Content-Length; every end-to-end header (If-Match,
If-None-Match, x-amz-*, Content-MD5, the signature) passes unchanged, the
``Host`` header included. One upstream connection per request (moto's
single-threaded server speaks HTTP/1.0 anyway); clients may keep theirs alive.

Run on its own (prints ``faultproxy ready on URL`` on stderr)::

    python -m tests.support.faultproxy --upstream http://127.0.0.1:5000 --rate 0.02 --seed 7
    python -m tests.support.faultproxy --moto --rate 0.02      # with an in-process moto server
"""

from __future__ import annotations

import http
import http.client
import json
import random
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tests.support.faultproxy.storm import Storm
from tests.support.serving import ThreadedServer

CONTROL_PREFIX = "/__faultproxy__/"

#: Fault kinds as drawn; the counters split ``drop`` and ``delay`` by outcome.
KINDS = ("error500", "error503", "drop", "delay", "error403", "error")
COUNTED = ("error500", "error503", "drop_landed", "drop_refused", "delay_forward", "delay_drop",
           "error403", "error")

_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
    "proxy-authorization", "te", "trailer", "trailers", "transfer-encoding", "upgrade",
    "expect", "content-length",
})

_S3_ERRORS = {
    "error500": (500, "Internal Server Error", "InternalError",
                 "We encountered an internal error. Please try again."),
    "error503": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "error403": (403, "Forbidden", "AccessDenied", "Access Denied"),
}


def default_weights() -> dict[str, float]:
    """Relative weights of the fault kinds (dropped responses of landed PUTs first;
    ``error``, the configured one, never unless asked for)."""
    return {"error500": 1.0, "error503": 1.0, "drop": 2.0, "delay": 0.1, "error": 0.0}


@dataclass
class FaultConfig:
    """What to inject.

    ``rate``: fraction (0..1) of storage requests faulted while ``enabled``.
    ``weights``: relative weight of each kind in :data:`KINDS` (0 disables one).
    ``drop_methods``: HTTP methods whose answer may be dropped after forwarding.
    ``delay_s``: seconds a delayed request is held (longer than the client's
    read timeout). ``delay_then``: ``forward``, ``drop`` or ``mixed``.
    ``error_status`` / ``error_code``: the answer of the ``error`` kind;
    ``error_region``: its ``x-amz-bucket-region`` header (as S3's redirects carry).
    ``limit``: how many more requests may be faulted (None: any number).
    """

    rate: float = 0.0
    weights: dict[str, float] = field(default_factory=default_weights)
    drop_methods: tuple[str, ...] = ("PUT",)
    delay_s: float = 11.0
    delay_then: str = "mixed"
    enabled: bool = True
    error_status: int = 403
    error_code: str = "AccessDenied"
    error_region: str | None = None
    limit: int | None = None

    def check(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"rate must be within [0, 1], got {self.rate}")
        unknown = set(self.weights) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {KINDS}")
        if any(w < 0 for w in self.weights.values()):
            raise ValueError("fault weights must be >= 0")
        if self.delay_then not in ("forward", "drop", "mixed"):
            raise ValueError("delay_then must be forward, drop or mixed")
        if self.delay_s < 0:
            raise ValueError("delay_s must be >= 0")
        if not 300 <= self.error_status <= 599 or not self.error_code.isalnum():
            raise ValueError("error_status must be within 300..599 and error_code a word")
        if self.limit is not None and self.limit < 0:
            raise ValueError("limit must be >= 0 (or None)")
        self.drop_methods = tuple(m.upper() for m in self.drop_methods)


def parse_weights(text: str) -> dict[str, float]:
    """``"drop=2,error503=1"`` -> weights (kinds not named keep their default)."""
    weights = default_weights()
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or name.strip() not in KINDS:
            raise ValueError(f"bad weight {part!r}: use KIND=NUMBER with KIND in {KINDS}")
        weights[name.strip()] = float(value)
    return weights


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512
    proxy: FaultProxy


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive towards clients; 100-continue handled
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- body ----------------------------------------------------------------
    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailer fields: not forwarded
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(3)  # the CRLF after the chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    # -- answers ----------------------------------------------------------------
    def _send(self, status: int, reason: str, headers: list[tuple[str, str]],
              data: bytes) -> None:
        self.send_response_only(status, reason)
        length_sent = False
        for name, value in headers:
            low = name.lower()
            if low == "content-length" and self.command == "HEAD":
                length_sent = True
                self.send_header(name, value)
            elif low not in _HOP_BY_HOP:
                self.send_header(name, value)
        if not length_sent and status >= 200 and status not in (204, 304):
            self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if data and self.command != "HEAD" and status not in (204, 304):
            self.wfile.write(data)

    def _s3_error(self, kind: str, request_no: int) -> None:
        headers = [("Content-Type", "application/xml")]
        if kind == "error":
            cfg = self.server.proxy.config
            status, code = cfg.error_status, cfg.error_code
            reason, message = http.HTTPStatus(status).phrase, f"{code}."
            if cfg.error_region is not None:
                headers.append(("x-amz-bucket-region", cfg.error_region))
        else:
            status, reason, code, message = _S3_ERRORS[kind]
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>{message} (injected by faultproxy)"
                f"</Message><Resource>{_xml_escape(self.path)}</Resource>"
                f"<RequestId>faultproxy-{request_no}</RequestId></Error>").encode()
        self._send(status, reason, headers, body)

    def _drop(self) -> None:
        """Close the connection without an answer."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- upstream -------------------------------------------------------------------
    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        proxy = self.server.proxy
        conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port,
                                          timeout=proxy.upstream_timeout_s)
        try:
            conn.putrequest(self.command, self.path, skip_host=True,
                            skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    conn.putheader(name, value)
            if body or self.command in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body if body else None)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.reason, resp.getheaders(), data
        finally:
            conn.close()

    # -- dispatch -----------------------------------------------------------------
    def _handle(self) -> None:
        try:
            body = self._read_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        if self.path.startswith(CONTROL_PREFIX):
            self._control(body)
            return
        proxy = self.server.proxy
        started = time.time()
        request_no, kind, then = proxy._decide(self.command)
        outcome, status = self._serve(proxy, body, request_no, kind, then)
        if proxy.request_log is not None:
            cond = ("if-match" if "If-Match" in self.headers else
                    "if-none-match" if "If-None-Match" in self.headers else None)
            proxy._log_request({"t": round(started, 4), "dt": round(time.time() - started, 4),
                                "n": request_no, "m": self.command, "path": self.path,
                                "cond": cond, "bytes": len(body), "fault": outcome,
                                "status": status})

    def _serve(self, proxy: FaultProxy, body: bytes, request_no: int, kind: str | None,
               then: str | None) -> tuple[str | None, int | None]:
        """Answer (or not) one storage request; (fault as counted, upstream status)."""
        if kind in _S3_ERRORS or kind == "error":
            self._s3_error(kind, request_no)
            return kind, None
        if kind == "delay":
            proxy._stopping.wait(proxy.config.delay_s)
            if then == "drop":
                self._drop()
                return "delay_drop", None
        try:
            status, reason, headers, data = self._forward(body)
        except (OSError, http.client.HTTPException) as exc:
            proxy._count("upstream_errors")
            msg = f"faultproxy: upstream failed: {type(exc).__name__}".encode()
            self.close_connection = True
            try:
                self._send(502, "Bad Gateway", [("Content-Type", "text/plain")], msg)
            except OSError:
                pass
            return "upstream_error", None
        if kind == "drop":
            counted = "drop_landed" if 200 <= status < 300 else "drop_refused"
            proxy._count_fault(counted)
            self._drop()
            return counted, status
        try:
            self._send(status, reason, headers, data)
        except OSError:  # the client gave up (a delayed request) or went away
            self.close_connection = True
        return ("delay_forward" if kind == "delay" else None), status

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    def _control(self, body: bytes) -> None:
        proxy = self.server.proxy
        action = self.path[len(CONTROL_PREFIX):].split("?", 1)[0].strip("/")
        status = 200
        try:
            if action == "stats" and self.command == "GET":
                pass
            elif action == "heal" and self.command == "POST":
                proxy.set_enabled(False)
            elif action == "break" and self.command == "POST":
                proxy.set_enabled(True)
            elif action == "reset" and self.command == "POST":
                proxy.reset_counts()
            elif action == "config" and self.command == "POST":
                proxy.configure(**json.loads(body or b"{}"))
            elif action == "storm" and self.command == "POST":
                proxy.storm(**json.loads(body or b"{}"))
            else:
                status = 404
        except (ValueError, TypeError) as exc:
            data = json.dumps({"error": str(exc)}).encode()
            self._send(400, "Bad Request", [("Content-Type", "application/json")], data)
            return
        answer = json.dumps(proxy.stats() if status == 200 else {"error": "unknown action"})
        self._send(status, "OK" if status == 200 else "Not Found",
                   [("Content-Type", "application/json")], answer.encode())


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class FaultProxy(ThreadedServer):
    """The proxy. ``start()`` serves from daemon threads; ``url`` is its endpoint.

    ``upstream``: the S3 server's URL (``http://host:port``); ``seed``: seeds
    the one RNG all fault decisions draw from; ``upstream_timeout_s``: how
    long to wait for the server per request, in seconds.
    """

    def __init__(self, upstream: str, *, seed: int = 0, config: FaultConfig | None = None,
                 host: str = "127.0.0.1", port: int = 0,
                 upstream_timeout_s: float = 120.0, request_log: str | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream = upstream.rstrip("/")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or 80
        self.upstream_timeout_s = upstream_timeout_s
        self.config = config or FaultConfig()
        self.config.check()
        self.seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._counts: dict[str, Any] = {}
        self._storm: Storm | None = None
        self.reset_counts()
        server = _Server((host, port), _Handler)
        server.proxy = self
        super().__init__(server, f"faultproxy-{server.server_address[1]}")
        self.url = f"http://{host}:{self.port}"
        self.request_log = open(request_log, "a", buffering=1) if request_log else None  # noqa: SIM115

    # -- lifecycle ----------------------------------------------------------------
    def stop(self) -> None:
        self._stopping.set()  # releases delayed requests
        super().stop()
        with self._lock:
            if self.request_log is not None:
                self.request_log.close()
                self.request_log = None

    # -- run-time control -------------------------------------------------------------
    def set_enabled(self, enabled: bool) -> None:
        """Faults on (True) or off (False); requests keep flowing either way."""
        with self._lock:
            self.config.enabled = bool(enabled)

    def heal(self) -> None:
        """Faults off (requests already being delayed still finish their delay)."""
        self.set_enabled(False)

    def configure(self, **changes: Any) -> None:
        """Change any :class:`FaultConfig` field (validated; the RNG continues).

        ``weights`` given here update the current weights kind by kind."""
        with self._lock:
            fields_ = asdict(self.config)
            unknown = set(changes) - set(fields_)
            if unknown:
                raise ValueError(f"unknown settings {sorted(unknown)}")
            if "weights" in changes:
                changes["weights"] = {**self.config.weights, **changes["weights"]}
            if "drop_methods" in changes:
                changes["drop_methods"] = tuple(changes["drop_methods"])
            candidate = FaultConfig(**{**fields_, **changes})
            candidate.check()
            self.config = candidate

    def storm(self, kinds: Sequence[str] = ("error500", "error503"), *,
              seconds: float | None = None, count: int | None = None,
              methods: Sequence[str] | None = None) -> None:
        """Fault every request of ``methods`` (None: all) with one of ``kinds`` for
        ``seconds`` and/or ``count`` such requests, whichever ends first (see
        :class:`~tests.support.faultproxy.storm.Storm`); replaces one that runs."""
        storm = Storm.of(kinds, KINDS, seconds=seconds, count=count, methods=methods)
        with self._lock:
            self._storm = storm

    def calm(self) -> None:
        """End the storm that runs, if any."""
        with self._lock:
            self._storm = None

    def _storm_now(self) -> Storm | None:
        """The storm that runs, forgetting one that ended (hold the lock)."""
        if self._storm is not None and self._storm.over():
            self._storm = None
        return self._storm

    def reset_counts(self) -> None:
        with self._lock:
            self._counts = {"requests": 0, "by_method": {}, "faults": dict.fromkeys(COUNTED, 0),
                            "upstream_errors": 0}

    def stats(self) -> dict[str, Any]:
        """Counters and settings; ``fault_pct`` is faults per 100 storage requests."""
        with self._lock:
            faults = dict(self._counts["faults"])
            out = {
                "requests": self._counts["requests"],
                "by_method": dict(self._counts["by_method"]),
                "faults": faults,
                "faulted": sum(faults.values()),
                "upstream_errors": self._counts["upstream_errors"],
                "config": {**asdict(self.config), "drop_methods": list(self.config.drop_methods)},
                "seed": self.seed,
                "upstream": self.upstream,
                "storm": None if (storm := self._storm_now()) is None else storm.stats(),
            }
        out["fault_pct"] = 100.0 * out["faulted"] / out["requests"] if out["requests"] else 0.0
        return out

    # -- decisions (called by the handler threads) ---------------------------------------
    def _decide(self, method: str) -> tuple[int, str | None, str | None]:
        """(request number, fault kind or None, then) for one request; counts it."""
        with self._lock:
            counts = self._counts
            counts["requests"] += 1
            counts["by_method"][method] = counts["by_method"].get(method, 0) + 1
            number = counts["requests"]
            cfg = self.config
            storm = self._storm_now()
            kinds = None if storm is None else storm.kinds_for(method, cfg.drop_methods)
            if kinds is None:
                if not cfg.enabled or cfg.rate <= 0 or cfg.limit == 0 or \
                        self._rng.random() >= cfg.rate:
                    return number, None, None
                kinds = [(k, w) for k, w in cfg.weights.items()
                         if w > 0 and (k != "drop" or method in cfg.drop_methods)]
            if not kinds:
                return number, None, None
            pick = self._rng.random() * sum(w for _, w in kinds)
            kind = kinds[-1][0]
            for k, w in kinds:
                if pick < w:
                    kind = k
                    break
                pick -= w
            then = None
            if kind == "delay":
                then = cfg.delay_then
                if then == "mixed":
                    then = "forward" if self._rng.random() < 0.5 else "drop"
                counts["faults"][f"delay_{then}"] += 1
            elif kind in _S3_ERRORS or kind == "error":
                counts["faults"][kind] += 1
            if storm is None and cfg.limit is not None:
                cfg.limit -= 1
            return number, kind, then

    def _log_request(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._lock:
            if self.request_log is not None:
                self.request_log.write(line)

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _count_fault(self, kind: str) -> None:
        with self._lock:
            self._counts["faults"][kind] += 1
