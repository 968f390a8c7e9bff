"""Run real broker processes for tests and wait on their own "ready" line.

The ready line's pattern is here once: the chaos runner (tools/chaos) and the
broker benchmark (bench/broker_bench.py) read their children's ready lines with it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: The line a broker prints on stderr once it serves (``osqueue-broker ID ready on
#: URL ...``, broker/cli.py); group 1 is the URL. The benchmark's servers
#: (bench/servers.py) print the same "ready on URL".
READY = re.compile(r"ready on (http://\S+)")
#: The broker's id, from that same line.
BROKER_ID = re.compile(r"osqueue-broker (\S+) ready on")


class BrokerProcess:
    """``python -m broker`` in a child process on 127.0.0.1 with a free port."""

    def __init__(self, store: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.store = store
        self.args = args
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    def start(self, timeout_s: float = 120.0, expect_ready: bool = True) -> BrokerProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "--store", self.store,
             "--listen", "127.0.0.1:0", "--log-level", "warning", *self.args],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=self.env,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if expect_ready and (not self._ready.wait(timeout_s) or not self.url):
            self.stop(signal.SIGKILL)
            raise RuntimeError("broker did not become ready:\n" + "".join(self.lines))
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            m = READY.search(line)
            if m and not self.url:
                self.url = m.group(1)
                self._ready.set()
        self._ready.set()

    def wait(self, timeout_s: float = 60.0) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout_s)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout_s)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def __enter__(self) -> BrokerProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def eventually(check: Callable[[], T], timeout_s: float = 30.0, what: str = "condition") -> T:
    """Poll ``check()`` until it returns something truthy; return it.

    For conditions another process brings about with no event to wait on
    (an archive object written after its commit, a takeover); fails with
    ``what`` after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.25)
