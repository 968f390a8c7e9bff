"""Broker process slots: each a fixed port (chosen once, so a restarted broker comes
back at the same URL) and the ``python -m broker`` process serving it, if any, with
start (waiting for 'ready' in its log), kill -9, SIGSTOP/SIGCONT and SIGTERM."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.support.broker_process import BROKER_ID, READY
from tools.chaos.children import CHILDREN, child_env, log_tail, wait_for_line


def pick_ports(n: int) -> list[int]:
    """``n`` distinct free ports BELOW the kernel's ephemeral range, so no client's
    outgoing connection takes a dead broker's port before it comes back."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.SystemRandom()
    ports: list[int] = []
    tries = 0
    while len(ports) < n:
        tries += 1
        if low > 12_000 and tries < 10_000:
            port = rng.randrange(10_000, low)
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


class BrokerSlot:
    """One broker URL (fixed port) and the process currently serving it, if any.

    ``lease_s``: the broker's ``--lease-s``, s; ``clock``: seconds since the run
    started (every recorded time is on it); ``say``: the runner's log line printer;
    the log goes to ``run_dir/broker-NAME.log``, each start marked in it;
    ``extra_argv``: more flags of ``python -m broker`` (the segment settings).
    """

    def __init__(self, name: str, port: int, store_url: str, lease_s: float, log_level: str,
                 run_dir: Path, clock: Callable[[], float], say: Callable[[str], None],
                 extra_argv: Sequence[str] = ()) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.store_url = store_url
        self.lease_s = lease_s
        self.log_level = log_level
        self.extra_argv = list(extra_argv)  # more flags of python -m broker
        self.log_path = run_dir / f"broker-{name}.log"
        self.clock = clock
        self.say = say
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.generation = 0
        self.lock = threading.RLock()
        self.starts: list[dict[str, Any]] = []
        self.start_failures: list[dict[str, Any]] = []

    def alive(self) -> bool:
        """True while a process serves this slot (it may be paused)."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout_s: float, attempts: int = 6) -> bool:
        """Start a broker on this slot's port; True once it printed 'ready' within
        ``timeout_s`` s.

        A start that fails (the port not yet free, a storage fault during its
        self-test) is retried up to ``attempts`` times, each failure recorded.
        """
        for attempt in range(1, attempts + 1):
            with self.lock:
                if self.alive():
                    return True
                with open(self.log_path, "ab") as log:
                    log.write(f"\n=== chaos: start of {self.name} (attempt {attempt}) at "
                              f"t={self.clock():.3f}s ===\n".encode())
                    offset = log.tell()
                argv = [sys.executable, "-m", "broker", "--store", self.store_url,
                        "--listen", f"127.0.0.1:{self.port}", "--lease-s", str(self.lease_s),
                        "--log-level", self.log_level, *self.extra_argv]
                proc = CHILDREN.spawn(argv, self.log_path, child_env())
                self.proc = proc
                self.paused = False
                self.generation += 1
                t_start = self.clock()
            m = wait_for_line(proc, self.log_path, offset, READY, timeout_s)
            if m is not None and proc.poll() is None:
                with open(self.log_path, "rb") as f:
                    f.seek(offset)
                    idm = BROKER_ID.search(f.read().decode("utf-8", "replace"))
                self.starts.append({"t": round(t_start, 3), "ready_t": round(self.clock(), 3),
                                    "pid": proc.pid,
                                    "broker_id": idm.group(1) if idm else None})
                return True
            with self.lock:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
                reason = log_tail(self.log_path, offset, 3)
                self.start_failures.append({"t": round(self.clock(), 3), "attempt": attempt,
                                            "exit": proc.returncode, "log": reason[-600:]})
                self.say(f"broker {self.name} failed to start (attempt {attempt}, exit "
                         f"{proc.returncode}): {reason[-300:]}")
            time.sleep(min(0.5 * attempt, 3.0))
        return False

    def signal(self, sig: int) -> bool:
        """Send ``sig`` to the running process (SIGSTOP and SIGCONT set and clear
        ``paused``); False if none runs."""
        with self.lock:
            if not self.alive():
                return False
            assert self.proc is not None
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                return False
            if sig == signal.SIGSTOP:
                self.paused = True
            elif sig == signal.SIGCONT:
                self.paused = False
            return True

    def kill(self) -> bool:
        """kill -9 and reap; True if a process was killed."""
        with self.lock:
            if not self.alive():
                return False
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            self.paused = False
            return True

    def terminate(self, timeout_s: float = 30.0) -> int | None:
        """SIGCONT + SIGTERM, wait up to ``timeout_s`` s, then kill -9; the exit status."""
        with self.lock:
            proc = self.proc
            if proc is None:
                return None
            if proc.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, sig)
            self.paused = False
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.say(f"broker {self.name} did not stop within {timeout_s:.0f}s of SIGTERM; "
                     "kill -9")
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            return proc.returncode
