"""The runner's child processes (brokers, moto, the fault proxy): spawning them in their
own sessions with this checkout on their path, waiting for a line in their logs, and
killing whatever is left at the end (also at exit and from the watchdog)."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

#: the checkout this runner belongs to (tools/chaos/ is two levels below it)
ROOT = Path(__file__).resolve().parents[2]


class Children:
    """Every child process this run started; :meth:`kill_all` kills what is left."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        #: where each child's pid and command line are appended (for a manual clean-up
        #: should the runner itself be killed with -9)
        self.pid_file: Path | None = None

    def spawn(self, argv: Sequence[str], log_path: Path, env: dict[str, str]
              ) -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=log, env=env, start_new_session=True,
                                    cwd=str(ROOT))
        with self._lock:
            self._procs.append(proc)
            if self.pid_file is not None:
                with open(self.pid_file, "a") as f:
                    f.write(f"{proc.pid} {' '.join(argv)}\n")
        return proc

    def kill_all(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, sig)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)


CHILDREN = Children()
atexit.register(CHILDREN.kill_all)


def child_env() -> dict[str, str]:
    """The environment of every child: this checkout first on the path, fake AWS keys."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)])
    env.setdefault("AWS_ACCESS_KEY_ID", "testing")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("AWS_ENDPOINT_URL", None)  # the store URL names the endpoint
    return env


def wait_for_line(proc: subprocess.Popen[bytes], log_path: Path, offset: int,
                  pattern: re.Pattern[str], timeout_s: float) -> re.Match[str] | None:
    """Poll ``log_path`` from ``offset`` until ``pattern`` shows up (the match), the
    process exits or ``timeout_s`` seconds pass (None)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
        m = pattern.search(text)
        if m:
            return m
        if proc.poll() is not None or time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def log_tail(log_path: Path, offset: int = 0, lines: int = 5) -> str:
    """The last ``lines`` lines of ``log_path`` from byte ``offset``, joined by " | "."""
    with open(log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    return " | ".join(text.strip().splitlines()[-lines:])
