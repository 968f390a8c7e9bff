"""How :class:`~osqueue_spark.client.QueueClient` sends one HTTP request.

The client knows the broker's API (paths, bodies, request keys, retries,
discovery); a transport knows only how to move bytes: ``send(method, url,
headers, body, timeout_s)`` returns the :class:`Response`, or raises
:class:`~broker.errors.BrokerUnreachable` when the request never reached the
broker and :class:`~broker.errors.BrokerUnavailable` when it failed after it
may have (the client retries both; every call it makes is safe to repeat).

* :class:`Urllib3Transport`, the default: urllib3 connections kept alive in a
  pool that the client's threads share. A client rebuilds it in a forked child
  (see ``QueueClient._own``), so parent and child never share a connection.
* :class:`MockTransport`, modelled on httpx's: hands each :class:`Request` to a
  function that returns the :class:`Response` (or raises as a transport
  would), so the client can be tested with neither a broker nor a network.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

import orjson
import urllib3

from broker.errors import BrokerUnavailable, BrokerUnreachable, TlsFailed

#: Longest wait (s) to open a connection to a broker; the read timeout is per call.
CONNECT_TIMEOUT_S = 5.0


class Request(NamedTuple):
    """One request as the client sends it."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None
    timeout_s: float

    def json(self) -> Any:
        """The body decoded as JSON (None without a body)."""
        return None if self.body is None else orjson.loads(self.body)


class Response(NamedTuple):
    """One answer: the status, the headers and the body's bytes."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Response:
        """An answer whose body is ``value`` as JSON."""
        return cls(status, {"content-type": "application/json"}, orjson.dumps(value))


class Transport(Protocol):
    """What the client needs from a transport (see the module docstring)."""

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout_s: float) -> Response:
        """Send one request and return the answer; ``timeout_s`` bounds the read."""
        ...

    def close(self) -> None:
        """Drop kept-alive connections; the transport may still be used after."""
        ...


class Urllib3Transport:
    """The default transport: a urllib3 pool of up to ``pool_size`` connections per
    broker, kept alive between calls, no retries of its own (the client retries)."""

    def __init__(self, pool_size: int = 32) -> None:
        self._pool = urllib3.PoolManager(maxsize=pool_size, retries=False)

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout_s: float) -> Response:
        try:
            resp = self._pool.request(
                method, url, body=body, headers=headers,
                timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=timeout_s))
        except (urllib3.exceptions.NewConnectionError,
                urllib3.exceptions.ConnectTimeoutError) as exc:
            raise BrokerUnreachable(
                f"cannot reach broker at {origin(url)}: {_why(exc)}") from None
        except urllib3.exceptions.SSLError as exc:
            raise TlsFailed(_tls_why(url, exc)) from None
        except urllib3.exceptions.HTTPError as exc:
            raise BrokerUnavailable(
                f"request to {origin(url)} failed after sending: {type(exc).__name__}") from None
        return Response(resp.status, resp.headers, resp.data)

    def close(self) -> None:
        self._pool.clear()

    def __repr__(self) -> str:
        return "Urllib3Transport()"


class MockTransport:
    """A transport that answers with ``handler(request)``: the handler returns a
    :class:`Response` or raises (``BrokerUnreachable``, ``BrokerUnavailable``) as a
    real transport would. For tests: no broker, no network, no threads."""

    def __init__(self, handler: Callable[[Request], Response]) -> None:
        self.handler = handler

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout_s: float) -> Response:
        return self.handler(Request(method, url, dict(headers), body, timeout_s))

    def close(self) -> None:
        pass


def _why(exc: Exception) -> str:
    """Why a connection failed: the system's reason ("Connection refused", "Name or
    service not known") when there is one, and urllib3's class."""
    cause = exc.__cause__
    reason = cause.strerror if isinstance(cause, OSError) else None
    return f"{reason} ({type(exc).__name__})" if reason else type(exc).__name__


def _tls_why(url: str, exc: Exception) -> str:
    """Why TLS with ``url``'s broker failed, and what to do: a certificate refused
    (its reason), or an answer that is not TLS (a plain HTTP broker)."""
    inner = exc.args[0] if exc.args else None
    if isinstance(inner, ssl.SSLCertVerificationError):
        return (f"the TLS certificate of the broker at {origin(url)} was refused: "
                f"{inner.verify_message or inner.reason}")
    reason = getattr(inner, "reason", None) or type(inner or exc).__name__
    plain = "http://" + origin(url).partition("://")[2]
    return (f"the broker at {origin(url)} does not speak TLS (try {plain}): the TLS "
            f"handshake failed ({reason})")


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: what an error names (no path, no query)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0].rpartition('@')[2]}"
