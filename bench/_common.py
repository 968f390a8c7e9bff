"""Helpers shared by the benchmark scripts: timing (interleaved rounds), result files
that record the machine and its load, and a moto S3 server in a child process."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import select
import shlex
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent


def load() -> list[float]:
    """The machine's load averages over 1, 5 and 15 minutes (``os.getloadavg``)."""
    return [round(x, 2) for x in os.getloadavg()]


#: The load when this benchmark process started (the first import of this module).
LOAD_AT_START = load()


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What a figure was measured on: cores (all, and those this process may use), the
    CPU model, Python and PySpark versions (None without PySpark), the platform."""
    try:
        pyspark: str | None = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        pyspark = None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cores": os.cpu_count(), "usable_cores": usable, "cpu_model": cpu_model(),
            "python": platform.python_version(), "pyspark": pyspark,
            "platform": platform.platform()}


def in_rounds(fns: Mapping[str, Callable[[], T]], rounds: int) -> dict[str, Any]:
    """Call each of ``fns`` once per round for ``rounds`` rounds, the order turning by
    one each round (so none always runs first, or right after another): what a
    comparison needs on a shared machine, whose load drifts between rounds but hardly
    within one. Returns ``{"values": {name: [result per round]}, "load": [the 1-minute
    load average after each round]}``."""
    names = list(fns)
    values: dict[str, list[T]] = {name: [] for name in names}
    loads = []
    for r in range(rounds):
        turn = r % len(names)
        for name in names[turn:] + names[:turn]:
            values[name].append(fns[name]())
        loads.append(load()[0])
    return {"values": values, "load": loads}


def interleaved(fns: Mapping[str, Callable[[], Any]], rounds: int) -> dict[str, Any]:
    """:func:`in_rounds` timing each call: ``{"seconds": {name: [s per round]},
    "load": [...]}``."""
    def timed(fn: Callable[[], Any]) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        return run

    out = in_rounds({name: timed(fn) for name, fn in fns.items()}, rounds)
    return {"seconds": out["values"], "load": out["load"]}


def median_ratio(numerators: list[float], denominators: list[float]) -> float:
    """The median over rounds of numerator / denominator (round by round)."""
    return statistics.median(n / d for n, d in zip(numerators, denominators, strict=True))


def best_of(fn: Any, repeat: int = 5) -> float:
    """The fastest of ``repeat`` runs of ``fn()``, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def command() -> str:
    """The command line of this benchmark, as run from the checkout's root."""
    argv = list(sys.argv)
    with contextlib.suppress(ValueError):
        argv[0] = str(Path(argv[0]).resolve().relative_to(ROOT))
    return " ".join([".venv/bin/python", *map(shlex.quote, argv)])


def child_output(script: str, root: Path, *args: str, timeout_s: float = 600) -> str:
    """Run ``script`` (a bench's own ``__file__``) with ``args`` in a child process
    whose ``PYTHONPATH`` and working directory are ``root`` (the tree under test:
    its broker is the one the child imports). Its stdout; raises CalledProcessError
    if it fails, TimeoutExpired past ``timeout_s`` seconds."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, script, *args], env=env, cwd=root,
                          capture_output=True, text=True, check=True,
                          timeout=timeout_s).stdout


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``bench/results/<name>.json`` with the command that made
    it, the machine (:func:`machine`) and its load averages at the start of the run
    and now: absolute figures drift with the load of a shared machine, ratios of
    interleaved rounds much less."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "command": command(),
        "machine": machine(),
        "load": {"at_start": LOAD_AT_START, "at_end": load()},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **payload,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


#: Fake credentials for a moto server on loopback: set for every S3 call a
#: benchmark makes there, so no real credential from the environment is ever sent.
MOTO_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1"}


def moto_env() -> dict[str, str]:
    """This process's environment with the AWS credentials replaced by :data:`MOTO_ENV`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL")}
    return {**env, **MOTO_ENV}


@contextlib.contextmanager
def moto_s3(bucket: str, ready_s: float = 60.0) -> Iterator[str]:
    """moto's S3 server (``python -m moto.server``) as a child process on
    127.0.0.1 and a free port, with ``bucket`` created; yields its endpoint URL
    and stops the server on exit (its objects are gone with it).

    moto's server is threaded and checks ``If-Match`` without a lock: its
    compare-and-set is honest for one writer at a time only (one broker), not
    for racing writers. Raises ``RuntimeError`` if it does not answer within
    ``ready_s`` seconds."""
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                             "-p", str(port)], env=moto_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + ready_s
        while True:  # no readiness line to wait for: poll until it accepts a connection
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {proc.returncode} before serving")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto server not serving after {ready_s:g} s") from None
                time.sleep(0.1)
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id=MOTO_ENV["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=MOTO_ENV["AWS_SECRET_ACCESS_KEY"])
        try:
            client.create_bucket(Bucket=bucket)
        finally:
            client.close()
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ChildProcess:
    """A benchmark's child process (``--one``), driven over its stdin and stdout: a
    command a line, answered by a line that starts with a prefix, then JSON. Kept up
    between commands, so rounds of several children interleave (depth_bench).
    ``error`` says why it stopped answering (it is then killed);
    ``args.child_timeout_s`` (seconds, 0: none) bounds each wait for an answer."""

    def __init__(self, cmd: list[str], args: Any, stack: contextlib.ExitStack,
                 env: Mapping[str, str] | None = None) -> None:
        self.args = args
        self.error: str | None = None
        self.row: dict[str, Any] = {}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        stack.callback(self.kill)

    def answer(self, prefix: str) -> Any:
        """The child's next line with ``prefix``, decoded; None (and ``error`` set) if it
        says something else, exits, or says nothing for ``--child-timeout-s``."""
        assert self.proc.stdout is not None
        timeout = self.args.child_timeout_s or None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if line.startswith(prefix):
            return json.loads(line[len(prefix):])
        self.error = (f"timed out after {self.args.child_timeout_s:g} s" if not ready else
                      f"no answer (exit status {self.proc.poll()}; see stderr above)")
        self.kill()
        return None

    def command(self, text: str, prefix: str) -> Any:
        """Send ``text``; its answer (see :meth:`answer`), None if the child is gone."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(text + "\n")
            self.proc.stdin.flush()
        except OSError:
            self.error = self.error or "the process went away"
            return None
        return self.answer(prefix)

    def result(self, base: dict[str, Any], result_prefix: str) -> dict[str, Any]:
        """The child's result row (asked for with ``finish``), after ``base``; the
        error, if any, in it."""
        if self.error is None:
            self.row = self.command("finish", result_prefix) or self.row
            if self.proc.wait(60) != 0 and self.error is None:
                self.error = f"exit status {self.proc.returncode}"
        return {**base, **self.row, **({"error": self.error} if self.error else {})}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
