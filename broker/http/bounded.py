"""uvicorn's HTTP protocol with bounds for slow and greedy clients (slowloris).

uvicorn bounds how long a kept-alive connection may idle between requests,
but not how long a client may take over a request's headers or body, nor
how many connections it holds, nor how large the headers may grow (httptools
sets no limit). :class:`BoundedHttpProtocol` adds, per connection:

* a header deadline: the request line and headers must arrive within
  ``header_timeout_s`` of the request's first byte (or of connecting, for a
  connection that sends nothing); past it the client gets 408 and the
  connection is closed (a connection that sent nothing is just closed);
* a body idle bound: a body may pause at most ``body_timeout_s`` between two
  pieces; past it the client gets 408 (if nothing was answered yet) and the
  connection is closed, and the app's pending read ends as a disconnect;
* a connection limit: a connection past ``max_connections`` open ones gets
  503 ``broker_unavailable`` (retryable) and is closed before any of it is read;
* a header size limit: more than :data:`broker.limits.MAX_HEADER_BYTES` of
  request line and headers gets 431 and a closed connection.

Every one of these answers, and uvicorn's own 400 for a request that is not
HTTP, is a JSON error body like the app's. A request whose bytes arrive in
one piece (the usual case) arms no timer: timers are armed only when a
request is still incomplete after the bytes at hand are parsed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, ClassVar, cast

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from broker.errors import (
    BrokerUnavailable,
    HeadersTooLarge,
    OsqueueError,
    RequestError,
    RequestTimeout,
)
from broker.limits import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
)

log = logging.getLogger("osqueue.http")

_IDLE, _HEADERS, _BODY = 0, 1, 2  # where the connection is in reading a request
_WARN_EVERY_S = 60.0  # at most one "too many connections" warning a minute


def error_response(error: OsqueueError) -> bytes:
    """A whole HTTP/1.1 response carrying ``error``'s JSON body, closing the connection."""
    body = orjson.dumps(error.to_dict())
    return b"".join([STATUS_LINE[error.status], b"content-type: application/json\r\n",
                     b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n",
                     body])


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds the module describes.

    The bounds are class attributes: :func:`bounded_protocol` makes a subclass
    with a broker's settings (uvicorn builds one instance a connection).
    """

    header_timeout_s: ClassVar[float] = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: ClassVar[float] = DEFAULT_BODY_TIMEOUT_S
    max_connections: ClassVar[int] = DEFAULT_MAX_CONNECTIONS
    max_header_bytes: ClassVar[int] = MAX_HEADER_BYTES
    _warned_at: ClassVar[float] = -_WARN_EVERY_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _IDLE
        self._timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._body_at = 0.0

    # -- connection ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            now = time.monotonic()
            if now - type(self)._warned_at >= _WARN_EVERY_S:
                type(self)._warned_at = now
                log.warning("refusing connections past max_connections=%d (503)",
                            self.max_connections)
            self._refuse(BrokerUnavailable(
                f"the broker holds its limit of {self.max_connections} connections; "
                "retry shortly"))
            return
        self._timer = self.loop.call_later(self.header_timeout_s, self._on_timer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():  # refused as not HTTP
            return
        if self._phase == _HEADERS:
            self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:
                self._refuse(HeadersTooLarge(
                    f"the request line and headers exceed {self.max_header_bytes} bytes"))
            elif self._timer is None:
                self._timer = self.loop.call_later(self.header_timeout_s, self._on_timer)
        elif self._phase == _BODY:
            self._body_at = self.loop.time()
            if self._timer is None:
                self._timer = self.loop.call_later(self.body_timeout_s, self._on_timer)

    def send_400_response(self, msg: str) -> None:
        self._refuse(RequestError(f"{msg.rstrip('.')}: not an HTTP/1.1 request"))

    # -- parser callbacks: where the request is -----------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._phase = _HEADERS
        self._header_bytes = 0

    def on_headers_complete(self) -> None:
        self._phase = _BODY
        self._cancel_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._phase = _IDLE
        self._cancel_timer()

    # -- bounds --------------------------------------------------------------------

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._phase == _BODY:
            idle = self.loop.time() - self._body_at
            if idle < self.body_timeout_s or self.flow.read_paused:
                # the client sent since, or the app is not reading: not the client's stall
                wait = self.body_timeout_s - idle if idle < self.body_timeout_s else \
                    self.body_timeout_s
                self._timer = self.loop.call_later(wait, self._on_timer)
                return
            self._refuse(RequestTimeout(
                f"the request body stalled for more than {self.body_timeout_s:g} s"),
                reading=True)
        elif self._phase == _HEADERS:
            self._refuse(RequestTimeout(
                f"the request headers took more than {self.header_timeout_s:g} s"))
        else:  # connected and sent nothing
            self.transport.close()

    def _refuse(self, error: OsqueueError, reading: bool = False) -> None:
        """Answer ``error`` and close the connection; a request the app is serving
        sees its client go away.

        ``reading``: the error is about the body of the request the app is
        serving, answered unless the app has begun its own answer; else it is
        about a request the app has not seen, answered unless an earlier one on
        this connection is still being served (its answer comes first, or none).
        """
        self._cancel_timer()
        cycle = self.cycle
        busy = cycle is not None and not cycle.response_complete
        answer = (cycle is not None and not cycle.response_started) if reading else not busy
        if answer:
            self.transport.write(error_response(error))
        if busy:
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()


def bounded_protocol(*, header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
                     body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
                     max_connections: int = DEFAULT_MAX_CONNECTIONS,
                     max_header_bytes: int = MAX_HEADER_BYTES) -> type[BoundedHttpProtocol]:
    """A :class:`BoundedHttpProtocol` class with these bounds (seconds; counts; bytes),
    to give uvicorn as its ``http`` protocol."""
    return cast(type[BoundedHttpProtocol], type("BoundedHttpProtocol", (BoundedHttpProtocol,), {
        "header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s,
        "max_connections": max_connections, "max_header_bytes": max_header_bytes,
        "_warned_at": -_WARN_EVERY_S}))
