"""How the test servers start and stop, in one place.

:class:`ThreadedServer` serves a bound ``socketserver`` server from a daemon
thread of this process: moto (:mod:`tests.support.motoserver`), the GCS test
server (:mod:`tests.support.gcsserver`), the fault proxy
(:mod:`tests.support.faultproxy`) and the broker relay
(:mod:`tests.support.broker_relay`) are each one. :class:`StopSignals` is the
serve-until-signalled loop of their scripts (and Azurite's launcher's);
:func:`free_port` picks a port for a server that must be told one.
"""

from __future__ import annotations

import signal
import socket
import socketserver
import threading
from types import FrameType
from typing import Self

#: How long :meth:`ThreadedServer.stop` waits for the serving thread to end, s.
JOIN_TIMEOUT_S = 10.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ThreadedServer:
    """``server`` (bound, not yet serving) served from a daemon thread named ``name``.

    :meth:`start` serves (and returns the server object, so ``X().start()`` reads as
    it did); :meth:`stop` stops serving, closes the listening socket and waits up to
    :data:`JOIN_TIMEOUT_S` for the thread; stopping twice, or a server never
    started, is fine. As a context manager: started on entry unless it already is,
    stopped on exit. A subclass sets its own state before calling ``__init__``,
    and may extend :meth:`stop` (to release what a request may be waiting on, say).
    """

    def __init__(self, server: socketserver.BaseServer, name: str) -> None:
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
        self._closed = False
        #: The port the server listens on.
        self.port = int(server.server_address[1])  # type: ignore[index]

    @property
    def serving(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._server.shutdown()  # (serve_forever runs in another thread: no deadlock)
        self._server.server_close()
        if self._thread.is_alive():
            self._thread.join(JOIN_TIMEOUT_S)

    def __enter__(self) -> Self:
        return self if self.serving else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StopSignals:
    """SIGTERM and SIGINT handlers, installed when made (in the main thread, before
    the server starts, so that no early signal is missed); :meth:`wait` blocks until
    one of them arrives. The serve-until-signalled loop of the servers' scripts."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop.set()

    def wait(self) -> None:
        while not self._stop.wait(1.0):  # a timeout keeps the main thread taking signals
            pass
