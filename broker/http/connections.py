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
* a send stall bound: once the answers waiting for a client fill the
  connection's send buffer (it reads none of them, e.g. pipelined requests
  whose answers it never takes), the client must take enough of them within
  ``body_timeout_s`` for the buffer to drain, else the connection is dropped
  with what it was not sent (an answer being sent keeps a connection busy,
  and a busy one is never shed: without this bound a client that reads
  nothing held its connections for ever);
* connection limits: at most ``max_connections`` open ones, at most
  ``max_per_address`` of them from one client address (a trusted proxy's are
  not capped); a new connection past either first sheds an idle or unheard
  one, by the rule of :mod:`broker.http.admission`, and when there is none to
  shed gets 503 ``broker_unavailable`` (retryable) and is closed before any
  of it is read; near the limits a new connection must send its first byte
  within ``BUSY_FIRST_BYTE_S``;
* a header size limit: more than :data:`broker.limits.MAX_HEADER_BYTES` of
  request line and headers gets 431 and a closed connection;
* uvicorn's warnings about what a client sent (bytes that are not HTTP, an
  ``Upgrade`` asked for) at most one line a minute each (:class:`Quiet`);
* a request whose answer was not wholly written when its connection was lost
  (dropped by a bound above, or gone on the client's side) is marked
  (:data:`ANSWER_LOST` in its ASGI scope, set before the app's pending
  ``send`` returns): uvicorn discards such an answer silently, and a claim
  hands back the jobs its lost answer held (:mod:`broker.http.disconnect`).

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
from broker.http.admission import Book
from broker.http.peers import NO_PROXIES, TrustedProxies, address_key
from broker.limits import (
    BUSY_FIRST_BYTE_S,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
)

log = logging.getLogger("osqueue.http")

_IDLE, _HEADERS, _BODY = 0, 1, 2  # where the connection is in reading a request
_WARN_EVERY_S = 60.0  # at most one "too many connections" warning a minute, and one "shed"
#: The ASGI scope key set (True) on a request whose answer its connection lost
#: before the answer was wholly written: its client never had all of it.
ANSWER_LOST = "osqueue.answer_lost"


class Quiet:
    """Warnings any client can cause, one line a minute per kind at most.

    ``warning(kind, line)`` logs ``line`` to ``logger`` unless a line of ``kind``
    (a constant string) was logged less than :data:`_WARN_EVERY_S` ago; the next
    one logged says how many were left out. A web page or a neighbour sends as
    many refused requests as it likes; the log must not grow with them.
    ``clock``: seconds (monotonic).
    """

    def __init__(self, logger: logging.Logger, clock: Any = time.monotonic) -> None:
        self.logger = logger
        self._clock = clock
        self._logged: dict[str, float] = {}  # kind -> when its last line was written
        self._left_out: dict[str, int] = {}  # kind -> lines not written since

    def warning(self, kind: str, line: str) -> None:
        now = self._clock()
        if now - self._logged.get(kind, -_WARN_EVERY_S) < _WARN_EVERY_S:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return
        self._logged[kind] = now
        left = self._left_out.pop(kind, 0)
        self.logger.warning("%s%s", line, f" ({left} more such since the last such line; "
                            "the next comes a minute later at the soonest)" if left else "")


class _QuietUvicorn:
    """uvicorn's logger for a connection, its warnings (each about what a client
    sent: not HTTP, an upgrade asked for) through a :class:`Quiet`."""

    def __init__(self, logger: logging.Logger, quiet: Quiet) -> None:
        self._logger = logger
        self._quiet = quiet

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._quiet.warning(msg, msg % args if args else msg)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


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
    max_per_address: ClassVar[int] = DEFAULT_MAX_CONNECTIONS // 2
    max_header_bytes: ClassVar[int] = MAX_HEADER_BYTES
    trusted: ClassVar[TrustedProxies] = NO_PROXIES
    #: every open connection of the server (one book per class bounded_protocol makes)
    book: ClassVar[Book[BoundedHttpProtocol]] = Book(DEFAULT_MAX_CONNECTIONS,
                                                     DEFAULT_MAX_CONNECTIONS // 2)
    _warned_at: ClassVar[float] = -_WARN_EVERY_S
    _shed_at: ClassVar[float] = -_WARN_EVERY_S
    _shed: ClassVar[int] = 0
    _stalled_at: ClassVar[float] = -_WARN_EVERY_S
    _stalled: ClassVar[int] = 0
    #: uvicorn's warnings about what clients sent (one Quiet per class bounded_protocol makes)
    quiet: ClassVar[Quiet] = Quiet(logging.getLogger("uvicorn.error"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _IDLE
        self._timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._body_at = 0.0
        self._hurried = False  # its first-byte deadline is the short one
        self._send_timer: asyncio.TimerHandle | None = None  # armed while writing is paused
        self.logger = cast(logging.Logger, _QuietUvicorn(self.logger, self.quiet))

    # -- connection ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        host = self.client[0] if self.client else ""
        address = address_key(host)
        verdict = self.book.admit(self, address, self.loop.time(),
                                  capped=host not in self.trusted)
        for victim in verdict.shed:
            victim.shed()
        if verdict.shed:
            last = verdict.shed[-1].client
            self._note_shed(len(verdict.shed), last[0] if last else "")
        if not verdict.admitted:
            self._refuse(self._full(verdict.full, host))
            return
        self._hurried = verdict.hurry and self.header_timeout_s > BUSY_FIRST_BYTE_S
        wait = BUSY_FIRST_BYTE_S if self._hurried else self.header_timeout_s
        self._timer = self.loop.call_later(wait, self._on_timer)

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # (before uvicorn wakes the app's send, which then returns, dropping the answer)
            cycle.scope[ANSWER_LOST] = True  # type: ignore[literal-required]
        self._cancel_timer()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        self.book.gone(self)
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle.response_complete:
            self.book.answered(self, self.loop.time())  # no request in flight: idle

    def pause_writing(self) -> None:
        """The send buffer is full: the client has ``body_timeout_s`` to take from it."""
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.body_timeout_s, self._on_send_stall)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _on_send_stall(self) -> None:
        """The client took too little of its answers for ``body_timeout_s``: drop the
        connection with what it was not sent (closing would wait for it to read, one
        closing already too)."""
        self._send_timer = None
        if self.flow.write_paused:
            self._note_stall()
            self.transport.abort()

    def shed(self) -> None:
        """Close this connection to make room for another (it is unheard or idle):
        one that is part-way through a request's headers is told 503, retryable."""
        if self._phase == _HEADERS:
            self._refuse(BrokerUnavailable("the broker is at its connection limit and closed "
                                           "this connection, which had not finished its "
                                           "request's headers; retry"))
        else:
            self._cancel_timer()
            self.transport.close()

    def _full(self, which: str, host: str) -> BrokerUnavailable:
        """The refusal of a connection no room could be made for (logged once a minute)."""
        now = time.monotonic()
        cls = type(self)
        limit = f"max_connections={self.max_connections}" if which == "total" else \
            f"max_connections_per_address={self.max_per_address}"
        if now - cls._warned_at >= _WARN_EVERY_S:
            cls._warned_at = now
            log.warning("refusing connections past %s, every connection busy (503); e.g. "
                        "from %s", limit, host or "?")
        if which == "total":
            return BrokerUnavailable(f"the broker holds its limit of {self.max_connections} "
                                     "connections, all busy; retry shortly")
        return BrokerUnavailable(f"this client address holds its limit of "
                                 f"{self.max_per_address} connections, all busy; retry shortly")

    def _note_shed(self, count: int, host: str) -> None:
        """Count shed connections; a warning at most once a minute says how many."""
        cls = type(self)
        cls._shed += count
        now = time.monotonic()
        if now - cls._shed_at >= _WARN_EVERY_S:
            log.warning("closed %d idle or unheard connection(s) to admit new ones (the "
                        "broker is at max_connections=%d, or an address at "
                        "max_connections_per_address=%d; the latest from %s); the next "
                        "such line comes a minute later at the soonest",
                        cls._shed, self.max_connections, self.max_per_address, host or "?")
            cls._shed_at = now
            cls._shed = 0

    def _note_stall(self) -> None:
        """Log a dropped slow reader, at most once a minute (a count of the others)."""
        cls = type(self)
        cls._stalled += 1
        now = time.monotonic()
        if now - cls._stalled_at >= _WARN_EVERY_S:
            log.warning("dropped %d connection(s) whose client read none of its answers for "
                        "body_timeout_s=%g s (the latest from %s); the next such line comes "
                        "a minute later at the soonest", cls._stalled, self.body_timeout_s,
                        self.client[0] if self.client else "?")
            cls._stalled_at = now
            cls._stalled = 0

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
        if self._hurried:  # it spoke in time: its headers get the whole header timeout
            self._hurried = False
            self._cancel_timer()

    def on_headers_complete(self) -> None:
        self._phase = _BODY
        self._cancel_timer()
        self.book.heard(self)
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
                     max_per_address: int | None = None,
                     max_header_bytes: int = MAX_HEADER_BYTES,
                     trusted: TrustedProxies = NO_PROXIES) -> type[BoundedHttpProtocol]:
    """A :class:`BoundedHttpProtocol` class with these bounds (seconds; counts; bytes),
    to give uvicorn as its ``http`` protocol; it keeps its own book of connections.
    ``max_per_address``: None is half of ``max_connections`` (at least 1);
    ``trusted``: the proxies whose connections are not capped per address."""
    per_address = max(1, max_connections // 2) if max_per_address is None else max_per_address
    return cast(type[BoundedHttpProtocol], type("BoundedHttpProtocol", (BoundedHttpProtocol,), {
        "header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s,
        "max_connections": max_connections, "max_per_address": per_address,
        "max_header_bytes": max_header_bytes, "trusted": trusted,
        "book": Book(max_connections, per_address),
        "_warned_at": -_WARN_EVERY_S, "_shed_at": -_WARN_EVERY_S, "_shed": 0,
        "_stalled_at": -_WARN_EVERY_S, "_stalled": 0,
        "quiet": Quiet(logging.getLogger("uvicorn.error"))}))
