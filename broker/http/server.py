"""Run a :class:`Broker` behind its HTTP API: as the main program or in a thread.

``BrokerServer.run()`` binds the socket first (so ``port=0`` picks a free port
and the broker can advertise its real URL), starts the broker (self-test,
load and take over existing queues; a bad queue object stops it here, before
anything is written), serves until told to stop (SIGTERM/SIGINT in the main
thread, or :meth:`BrokerServer.stop`), then drains: stop accepting, finish in-flight
requests, flush every queue and clear its broker record.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import signal
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any
from urllib.parse import urlsplit

import uvicorn

from broker.gcpause import tune_for_broker_process
from broker.http.admission import Book
from broker.http.app import build_app
from broker.http.connections import BoundedHttpProtocol, bounded_protocol
from broker.http.hosts import is_loopback
from broker.http.peers import TrustedProxies
from broker.service.broker import Broker
from broker.service.config import BrokerConfig
from broker.service.history import History
from broker.storage import ObjectStore

log = logging.getLogger("osqueue.server")


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: we drain the broker after it stops
    (uvicorn would re-raise SIGTERM once its server is down and kill the process
    before the broker flushed and cleared its records)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop when installed: with the standard loop, uvicorn's
    responses stall about 40 ms each here (a Nagle / delayed-ACK interaction)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def primary_address() -> str:
    """This machine's address as other machines see it, as best as can be told.

    The host name's address, unless that is loopback (``/etc/hosts`` often maps
    the name to 127.0.1.1); then the source address of the default route (a
    UDP ``connect`` sends nothing); ``127.0.0.1`` if neither is known.
    """
    try:
        addr = socket.gethostbyname(socket.gethostname())
    except OSError:
        addr = "127.0.0.1"
    if not is_loopback(addr):
        return addr
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: a route lookup, no packet
            routed: str = probe.getsockname()[0]
        except OSError:
            return addr
    return routed if routed != "0.0.0.0" else addr


def _advertised(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):
        host = primary_address()
        if is_loopback(host):
            log.warning("listening on every interface but advertising %s: other machines "
                        "cannot use that; give an advertise URL", host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def advertise_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as an advertised broker URL, or None.

    It must be http(s) and carry no user or password: it is written into every
    queue object the broker owns, answered by ``/healthz`` and logged. The
    answer never quotes a URL that has an ``@`` (it may hold a secret).
    """
    if not url.startswith(("http://", "https://")):
        shown = "(not shown: it has an '@')" if "@" in url else repr(url)
        return f"must be an http(s) URL, got {shown}"
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return ("must not carry a user or password (it is written into the queue objects "
                "and shown to every client): give http(s)://host:port, and a bearer token")
    return None


class BrokerServer:
    """A broker and its HTTP server. Use :meth:`run` (blocking) or :meth:`start_in_thread`.

    ``url`` is the advertised URL: what clients and executors should use, and
    what the broker writes into every queue object it owns (other brokers and
    clients discover the owner from it). ``token`` is the bearer token every
    request must carry (None: no auth); no repr or log line shows it.
    """

    def __init__(self, store: ObjectStore, host: str = "127.0.0.1", port: int = 0, *,
                 token: str | None = None, config: BrokerConfig | None = None,
                 advertise_url: str | None = None, advertise_host: str | None = None,
                 drain_s: float = 30.0,
                 on_ready: Callable[[BrokerServer], None] | None = None,
                 tune_gc: bool = False) -> None:
        """``advertise_url``: the URL to advertise, as given; else
        ``http://<advertise_host>:<bound port>``; else one made from ``host``
        (a wildcard host advertises this machine's name's address).
        ``tune_gc``: make the whole process a broker's for the garbage collector
        (:func:`broker.gcpause.tune_for_broker_process`); off for a broker embedded
        in somebody else's process unless its owner asks.

        Raises ``ValueError`` for an ``advertise_url`` that is not http(s) or a
        ``config.trusted_proxies`` entry that is not an IP address or network, and
        ``OSError`` if ``host:port`` cannot be bound.
        """
        problem = None if advertise_url is None else advertise_url_problem(advertise_url)
        if problem:
            raise ValueError(f"advertise_url {problem}")
        self._trusted = TrustedProxies.parse((config or BrokerConfig()).trusted_proxies)
        if tune_gc:
            tune_for_broker_process()
        self.store = store
        self.host = host
        self.config = config or BrokerConfig()
        self._token = token
        self._advertise = advertise_url
        self._drain_s = drain_s
        self._on_ready = on_ready
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(2048)  # connections wait in the backlog until uvicorn serves
        self.port: int = self._sock.getsockname()[1]
        self.url = advertise_url or _advertised(advertise_host or host, self.port)
        self.config.url = self.url
        self.broker = Broker(store, self.config)
        self._server: _Server | None = None
        #: the open client connections by address and state, once serving (for
        #: tests and introspection; read-only from other threads)
        self.connections: Book[BoundedHttpProtocol] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        return f"BrokerServer({self.url!r}, store={self.store.url!r}, " \
               f"auth={self._token is not None})"

    @property
    def dashboard_url(self) -> str:
        """The web dashboard's address (``{url}/ui/``); with a token, its login form
        asks for :attr:`token`."""
        return f"{self.url}/ui/"

    def _repr_html_(self) -> str:
        """A notebook shows the handle as a link to its dashboard."""
        url = html.escape(self.dashboard_url, quote=True)
        return f'osqueue broker: <a href="{url}" target="_blank" rel="noopener">{url}</a>'

    @property
    def token(self) -> str | None:
        """The bearer token clients must send (None: no auth). Never log it."""
        return self._token

    async def serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            await self.broker.start()
        except BaseException:
            self._sock.close()
            raise
        history = History(self.broker, interval_s=self.config.history_interval_s)
        app = build_app(self.broker, token=self._token, history=history)
        cfg = self.config
        protocol = bounded_protocol(header_timeout_s=cfg.header_timeout_s,
                                    body_timeout_s=cfg.body_timeout_s,
                                    max_connections=cfg.max_connections,
                                    max_per_address=cfg.max_connections_per_address,
                                    trusted=self._trusted)
        self.connections = protocol.book
        # log_config=None: uvicorn's loggers propagate to the process's handlers (the
        # broker's JSON lines, broker.logs) instead of printing plain text of their own.
        # Forwarded headers are believed from the trusted proxies only (none: ignored).
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=max(1, round(self._drain_s)),
                                http=protocol, ws="none", log_config=None,
                                timeout_keep_alive=30, proxy_headers=bool(self._trusted),
                                forwarded_allow_ips=self._trusted.as_strings() or None)
        self._server = server = _Server(config)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._on_signal, sig)
        self._ready.set()
        if self._on_ready is not None:
            self._on_ready(self)
        sampling = self._loop.create_task(history.run(), name="dashboard history")
        try:
            await server.serve(sockets=[self._sock])
        finally:
            sampling.cancel()
            await self.broker.stop(self._drain_s)
            self._sock.close()

    def _on_signal(self, sig: int) -> None:
        log.info("received %s: draining", signal.Signals(sig).name)
        if self._server is not None:
            self._server.should_exit = True

    def run(self) -> None:
        """Serve in this thread until SIGTERM/SIGINT; then drain and return."""
        run_loop(self.serve())

    # -- embedded use -------------------------------------------------------------
    def start_in_thread(self, timeout_s: float | None = None) -> BrokerServer:
        """Serve from a daemon thread; return once it accepts requests.

        Raises whatever stopped the broker from starting (a corrupt queue
        object, an unsafe store, storage failing for the whole start-up time)
        in the calling thread. ``timeout_s``: raise ``TimeoutError`` if it has
        not started by then; None waits as long as start-up does (it is bounded
        by ``startup_timeout_s``, then the takeovers' ``commit_timeout_s``).
        """

        def main() -> None:
            try:
                run_loop(self.serve())
            except BaseException as exc:  # handed to the caller of start_in_thread
                self._error = exc
                self._ready.set()

        self._thread = threading.Thread(target=main, name=f"osqueue-broker-{self.port}",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"broker did not start within {timeout_s} s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Drain and stop a broker started with :meth:`start_in_thread`."""
        if self._server is not None and self._loop is not None and not self._loop.is_closed():
            server = self._server
            self._loop.call_soon_threadsafe(setattr, server, "should_exit", True)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> BrokerServer:
        return self if self._thread is not None else self.start_in_thread()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
