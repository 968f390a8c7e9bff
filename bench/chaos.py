"""Chaos runner: real brokers, real clients, a seeded nemesis, then a check of the store.

    python bench/chaos.py --store file --seed 1 --seconds 60
    python bench/chaos.py --store s3 --seed 1 --preset short
    python bench/chaos.py --store s3 --seed 1 --preset long --out chaos-s3.json

(with this checkout on PYTHONPATH or not: the runner puts it first on the path
of itself and of every child process.)

What one run does (all times are wall-clock seconds):

1. Setup. ``--brokers`` broker processes (``python -m broker``) on one store,
   each on a FIXED port chosen at start, so a restarted broker comes back at
   the same URL. ``--store file``: a directory in the run directory.
   ``--store s3``: a moto S3 server process and a fault proxy process
   (bench/faultproxy.py) in front of it; brokers talk to S3 through the
   proxy, the runner's own reads (owner look-ups, the drain, the checker)
   and the clients' store look-ups go to moto directly. The queue is created
   with ``--max-attempts`` and short retry backoffs.
2. Chaos phase (``--seconds``). Producer threads push jobs with unique
   payloads ``{"p": producer, "n": counter}`` through ``QueueClient.push_many``
   (batches of 1-50, each job with an idempotency key unless --no-push-keys;
   a failed keyed batch is pushed again with the same keys), at
   ``--push-rate`` jobs/s in total, pausing while more than ``--max-backlog``
   acknowledged jobs wait. Every acknowledged id is recorded with its
   payload; a push that raised is recorded as "attempted". Consumer threads
   claim batches, complete most jobs with result ``{"by": worker, "token":
   token}``, fail ``--fail-prob`` of them (retried), and let ``--lapse-prob``
   of them lapse (a dead worker; half of those get a late complete with the
   old token after the lease ran out). Every answered complete is recorded.
   The nemesis runs a schedule drawn from ``--seed`` (printed at start; the
   same seed gives the same schedule): ``--kills`` kill -9 of the broker that
   owns the queue (read from the queue object's ``broker.url``), restarted
   on its port after a random 0.5-3 s; ``--pauses`` SIGSTOP of the owner for
   ``--lease-s`` + 1-3 s, then SIGCONT; ``--competitors`` extra brokers
   started on the same store for a while, then stopped (SIGTERM or kill -9);
   on S3 the proxy faults ``--fault-rate`` of all storage requests
   throughout (500/503 without forwarding, PUTs that land with their answer
   dropped, requests held past the S3 client's timeout).
3. Heal: producers stop (a failed keyed batch is still pushed until it is
   acknowledged), faults off, SIGCONT everything, competitors stopped, every
   broker slot running.
4. Drain: consumers keep going (no more fails or lapses) until the queue
   object holds no pending or claimed job, at most ``--drain-timeout-s``.
   Then clients stop and brokers get SIGTERM.
5. Check the store itself (queue object and archive objects, read directly):
   * lost: an acknowledged push whose id is in neither the queue object
     nor the archive (with its payload);
   * duplicated: one payload present as more than one job (queue + archive);
   * unexpected: a job whose payload no producer ever pushed, or whose id is
     not the acknowledged id of its payload;
   * superseded: a complete answered ok for token T of job J, but the
     archive's line for J carries another token (consumers put their token
     in the result) or worker, or J is not archived (still queued, or gone);
   * double: a job id on more than one archive line;
   * drain: whether the queue emptied (only dead jobs may remain).
   Exit status 1 if any of these is non-zero or the drain did not finish,
   0 otherwise (2: bad arguments or setup failed, 3: --max-runtime-s hit,
   130: interrupted). ``--require-bar`` also fails the run (status 4) when
   the acceptance figures (acknowledged jobs, kills, pauses, faults, outage)
   miss the bar given by --bar-*.

Availability: a client call counts as progress when it durably did
something: a push acknowledged, a claim that returned jobs, a complete with
at least one ok. Reported: the longest window without progress during the
chaos phase, and the outage after each kill (and each pause): the time from
the signal to the first progress of a call started after it.

Every child process runs in its own session and is killed in ``finally``
and ``atexit`` (and by the watchdog after ``--max-runtime-s``). The run
directory holds for post-mortems: children.txt (pid and command of every
child, should the runner itself be killed with -9), broker-*.log (each start marked with its
time), moto.log, faultproxy.log, s3-requests.jsonl (every storage request
with its fault and answer), records.json (what the clients saw: every
acknowledged id and when, every claim and complete answer) and, for S3 after
a failing run, store-dump/ (a copy of every object: moto keeps them in
memory). A temporary run directory is deleted after a passing run unless
``--keep-run-dir``; it is kept after a failing one (its path is printed), and
a ``--run-dir`` is always kept.
"""

from __future__ import annotations

import argparse
import atexit
import bisect
import collections
import contextlib
import heapq
import itertools
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from broker import archive, keys  # noqa: E402
from broker import state as S  # noqa: E402
from broker.errors import NotFound, OsqueueError  # noqa: E402
from broker.storage import ObjectStore, store_from_url  # noqa: E402
from osqueue_spark import QueueClient  # noqa: E402

QUEUE = "chaos"
READY = re.compile(r"ready on (http://\S+)")
BROKER_ID = re.compile(r"osqueue-broker (\S+) ready on")


# ---------------------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------------------

#: ``--preset`` values: defaults for a quick look and for the acceptance run
#: (options given on the command line still win).
PRESETS: dict[str, dict[str, Any]] = {
    "short": {"seconds": 30.0, "kills": 2, "pauses": 1, "competitors": 1},
    "long": {"seconds": 660.0, "kills": 16, "pauses": 6, "competitors": 4, "push_rate": 50.0,
             "fault_rate": 0.02, "require_bar": True},
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python bench/chaos.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("run")
    g.add_argument("--preset", choices=sorted(PRESETS),
                   help="short: 30 s, 2 kills, 1 pause, 1 competitor. long (the acceptance "
                        "run, about 12-15 minutes): 660 s, 16 kills, 6 pauses, 4 competitors, "
                        "50 jobs/s, 2%% faults on S3, --require-bar. Explicit options win")
    g.add_argument("--store", choices=["file", "s3"], default="file",
                   help="file: a directory in the run directory; s3: moto behind the fault "
                        "proxy (default file)")
    g.add_argument("--seed", type=int, default=1,
                   help="seeds the nemesis schedule, the clients' choices and the fault proxy")
    g.add_argument("--seconds", type=float, default=60.0,
                   help="duration of the chaos phase, s (default 60)")
    g.add_argument("--out", help="write all figures, the schedule and the nemesis log here "
                                 "(JSON)")
    g.add_argument("--run-dir", help="directory for logs and the file store (default: a new "
                                     "temporary directory)")
    g.add_argument("--keep-run-dir", action="store_true",
                   help="keep the run directory even after a passing run")
    g.add_argument("--dump-store", choices=["never", "fail", "always"], default="fail",
                   help="copy every object of an S3 store into RUN_DIR/store-dump after the "
                        "check (moto keeps it in memory only): never, after a failing run "
                        "(default), or always")
    g.add_argument("--max-runtime-s", type=float, default=None,
                   help="watchdog: kill everything and exit 3 after this long (default: "
                        "seconds + drain timeout + 300)")
    g = p.add_argument_group("brokers")
    g.add_argument("--brokers", type=int, default=3,
                   help="broker processes on the store, each on a fixed port (default 3)")
    g.add_argument("--lease-s", type=float, default=5.0,
                   help="broker lease, passed as --lease-s to python -m broker (default 5)")
    g.add_argument("--broker-log-level", default="warning",
                   help="--log-level of the brokers (default warning)")
    g.add_argument("--broker-start-timeout-s", type=float, default=60.0,
                   help="how long a broker may take to print 'ready', s (default 60)")
    g = p.add_argument_group("clients")
    g.add_argument("--producers", type=int, default=4, help="producer threads (default 4)")
    g.add_argument("--consumers", type=int, default=4, help="consumer threads (default 4)")
    g.add_argument("--push-rate", type=float, default=60.0,
                   help="target jobs pushed per second, all producers together (default 60)")
    g.add_argument("--max-backlog", type=int, default=3000,
                   help="producers wait while more acknowledged jobs than this are "
                        "unfinished (default 3000)")
    g.add_argument("--pad-bytes", type=int, default=0,
                   help="extra bytes of padding in every payload (default 0)")
    g.add_argument("--no-push-keys", dest="push_keys", action="store_false",
                   help="push without idempotency keys (and never re-push a failed batch)")
    g.add_argument("--claim-max", type=int, default=20, help="claim batches of 1..N (default 20)")
    g.add_argument("--claim-wait-s", type=float, default=0.5,
                   help="long-poll of a claim, s (default 0.5)")
    g.add_argument("--job-lease-s", type=float, default=8.0,
                   help="lease consumers ask for on claimed jobs, s (default 8)")
    g.add_argument("--fail-prob", type=float, default=0.05,
                   help="fraction of claimed jobs failed (retried later) (default 0.05)")
    g.add_argument("--lapse-prob", type=float, default=0.02,
                   help="fraction of claimed jobs left to lapse, as by a dead worker "
                        "(default 0.02)")
    g.add_argument("--max-attempts", type=int, default=10,
                   help="queue setting max_attempts (default 10)")
    g.add_argument("--client-timeout-s", type=float, default=5.0,
                   help="QueueClient timeout_s per request (default 5)")
    g.add_argument("--client-retry-s", type=float, default=5.0,
                   help="QueueClient retry_s: how long it retries transient failures "
                        "(default 5)")
    g.add_argument("--client-mode", choices=["auto", "native", "rotate"], default="auto",
                   help="native: QueueClient(list of URLs); rotate: the runner's adapter "
                        "(one URL, next one on errors); auto: native if QueueClient takes a "
                        "list (default auto)")
    g = p.add_argument_group("nemesis")
    g.add_argument("--kills", type=int, default=3, help="kill -9 of the owner (default 3)")
    g.add_argument("--pauses", type=int, default=1,
                   help="SIGSTOP of the owner past the broker lease (default 1)")
    g.add_argument("--competitors", type=int, default=1,
                   help="extra brokers started on the store for a while (default 1)")
    g.add_argument("--restart-min-s", type=float, default=0.5,
                   help="a killed broker restarts after U(min, max) s (default 0.5)")
    g.add_argument("--restart-max-s", type=float, default=3.0, help="(default 3)")
    g.add_argument("--pause-extra-min-s", type=float, default=1.0,
                   help="a pause lasts lease + U(min, max) s (default 1)")
    g.add_argument("--pause-extra-max-s", type=float, default=3.0, help="(default 3)")
    g = p.add_argument_group("S3 faults (--store s3)")
    g.add_argument("--fault-rate", type=float, default=0.02,
                   help="fraction of storage requests faulted during the chaos phase "
                        "(default 0.02)")
    g.add_argument("--fault-weights", default="",
                   help="relative weights of the kinds, e.g. drop=2,error500=1,error503=1,"
                        "delay=0.1 (the default)")
    g.add_argument("--fault-delay-s", type=float, default=11.0,
                   help="how long a delayed request is held, s; the broker's S3 read "
                        "timeout is 10 s (default 11)")
    g.add_argument("--fault-delay-then", choices=["forward", "drop", "mixed"], default="mixed",
                   help="after the delay, forward the request or drop it unsent")
    g = p.add_argument_group("drain and bar")
    g.add_argument("--drain-timeout-s", type=float, default=180.0,
                   help="give up draining after this long, s (default 180)")
    g.add_argument("--require-bar", action="store_true",
                   help="exit 4 if the acceptance figures miss the bar below")
    g.add_argument("--bar-acked", type=int, default=20_000,
                   help="acknowledged jobs wanted (default 20000)")
    g.add_argument("--bar-kills", type=int, default=15,
                   help="kills of the owner wanted (default 15)")
    g.add_argument("--bar-pauses", type=int, default=5,
                   help="pauses of the owner past its lease wanted (default 5)")
    g.add_argument("--bar-competitors", type=int, default=1,
                   help="competing brokers wanted (default 1)")
    g.add_argument("--bar-fault-pct", type=float, default=1.0,
                   help="S3: %% of storage requests faulted wanted, with at least one "
                        "dropped answer of a landed PUT (default 1)")
    g.add_argument("--bar-outage-extra-s", type=float, default=5.0,
                   help="the bar for the outage after a kill is lease + this, s (default 5)")
    return p


def check_args(args: argparse.Namespace) -> None:
    problems = []
    if args.brokers < 1:
        problems.append("--brokers must be >= 1")
    if args.producers < 1 or args.consumers < 1:
        problems.append("--producers and --consumers must be >= 1")
    if args.seconds <= 0 or args.lease_s <= 0:
        problems.append("--seconds and --lease-s must be > 0")
    if min(args.kills, args.pauses, args.competitors) < 0:
        problems.append("--kills, --pauses, --competitors must be >= 0")
    if not 0 <= args.fault_rate <= 1:
        problems.append("--fault-rate must be within [0, 1]")
    if not 0 <= args.fail_prob + args.lapse_prob <= 1:
        problems.append("--fail-prob + --lapse-prob must be within [0, 1]")
    if args.claim_max < 1 or args.max_attempts < 1:
        problems.append("--claim-max and --max-attempts must be >= 1")
    if args.restart_min_s > args.restart_max_s or \
            args.pause_extra_min_s > args.pause_extra_max_s:
        problems.append("min delays must not exceed max delays")
    if problems:
        raise SystemExit("chaos: " + "; ".join(problems))


# ---------------------------------------------------------------------------------------
# child processes
# ---------------------------------------------------------------------------------------

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
    with open(log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    return " | ".join(text.strip().splitlines()[-lines:])


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
    """One broker URL (fixed port) and the process currently serving it, if any."""

    def __init__(self, name: str, port: int, store_url: str, lease_s: float, log_level: str,
                 run_dir: Path, clock: Callable[[], float], say: Callable[[str], None]) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.store_url = store_url
        self.lease_s = lease_s
        self.log_level = log_level
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
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout_s: float, attempts: int = 6) -> bool:
        """Start a broker on this slot's port; True once it printed 'ready'.

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
                        "--log-level", self.log_level]
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


# ---------------------------------------------------------------------------------------
# the store: file, or S3 through the fault proxy
# ---------------------------------------------------------------------------------------

class StoreSetup:
    """Where brokers write (``broker_url``) and where the runner reads (``direct_url``)."""

    def __init__(self, args: argparse.Namespace, run_dir: Path) -> None:
        self.kind = args.store
        self.args = args
        self.run_dir = run_dir
        self.broker_url = ""
        self.direct_url = ""
        self.proxy_url: str | None = None
        self._control: Any = None
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        if self.kind == "file":
            path = self.run_dir / "store"
            path.mkdir(parents=True, exist_ok=True)
            self.broker_url = self.direct_url = f"file://{path}"
            return
        from bench.faultproxy import RemoteControl

        bucket = f"osq-chaos-{self.args.seed % 100000}-{uuid.uuid4().hex[:8]}"
        env = child_env()
        moto_log = self.run_dir / "moto.log"
        moto = CHILDREN.spawn([sys.executable, "-m", "bench.motoserver", "--bucket", bucket],
                              moto_log, env)
        self.procs.append(moto)
        m = wait_for_line(moto, moto_log, 0, re.compile(r"motoserver ready on (http://\S+)"),
                          60)
        if m is None:
            raise RuntimeError(f"moto did not start: {log_tail(moto_log)}")
        moto_url = m.group(1)
        proxy_log = self.run_dir / "faultproxy.log"
        proxy = CHILDREN.spawn(
            [sys.executable, "-m", "bench.faultproxy", "--upstream", moto_url,
             "--seed", str(self.args.seed), "--rate", str(self.args.fault_rate),
             "--weights", self.args.fault_weights, "--delay-s", str(self.args.fault_delay_s),
             "--delay-then", self.args.fault_delay_then, "--disabled",
             "--log-requests", str(self.run_dir / "s3-requests.jsonl")], proxy_log, env)
        self.procs.append(proxy)
        m = wait_for_line(proxy, proxy_log, 0, re.compile(r"faultproxy ready on (http://\S+)"),
                          60)
        if m is None:
            raise RuntimeError(f"fault proxy did not start: {log_tail(proxy_log)}")
        self.proxy_url = m.group(1)
        self._control = RemoteControl(self.proxy_url)
        self.broker_url = f"s3://{bucket}/chaos?endpoint={self.proxy_url}"
        self.direct_url = f"s3://{bucket}/chaos?endpoint={moto_url}"

    def faults(self, on: bool) -> None:
        if self._control is not None:
            self._control.set_enabled(on)

    def fault_stats(self) -> dict[str, Any] | None:
        if self._control is None:
            return None
        try:
            out: dict[str, Any] = self._control.stats()
            return out
        except OSError as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)


def open_store(url: str) -> ObjectStore:
    return store_from_url(url)


def read_state_raw(store: ObjectStore) -> dict[str, Any] | None:
    """The queue object as plain JSON, or None if it does not exist yet."""
    try:
        raw: dict[str, Any] = orjson.loads(store.read(keys.state_key(QUEUE)).data)
        return raw
    except NotFound:
        return None


# ---------------------------------------------------------------------------------------
# clients
# ---------------------------------------------------------------------------------------

class Client(Protocol):
    def push_many(self, jobs: Iterable[Any], batch_size: int = ...) -> list[str]: ...
    def claim(self, worker: str, max_jobs: int = ..., lease_s: float = ...,
              wait_s: float = ...) -> list[Any]: ...
    def complete_many(self, items: Iterable[tuple[str, Any]]) -> list[Any]: ...
    def fail_many(self, items: Iterable[tuple[str, str, float | None]]) -> list[Any]: ...
    def create(self, **settings: Any) -> dict[str, Any]: ...
    def close(self) -> None: ...


class RotatingClient:
    """STOP-GAP until ``QueueClient`` takes several broker URLs (remove it then): one
    ``QueueClient`` on one URL; any error moves it to the next URL of the list (the
    caller still sees the error). ``QueueClient`` itself follows "not the broker"
    answers and, given ``store=``, the broker record in the queue object."""

    def __init__(self, urls: Sequence[str], queue: str, *, store: str, timeout_s: float,
                 retry_s: float, start: int = 0) -> None:
        self.urls = list(urls)
        self._next = start % len(self.urls)
        self._client = QueueClient(self.urls[self._next], queue, store=store,
                                   timeout_s=timeout_s, retry_s=retry_s)

    def _rotate(self) -> None:
        self._next = (self._next + 1) % len(self.urls)
        self._client.url = self.urls[self._next]

    def _call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except Exception:
            self._rotate()
            raise

    def push_many(self, jobs: Iterable[Any], batch_size: int = 1000) -> list[str]:
        out: list[str] = self._call(self._client.push_many, jobs, batch_size)
        return out

    def claim(self, worker: str, max_jobs: int = 1, lease_s: float = 30.0,
              wait_s: float = 0.0) -> list[Any]:
        out: list[Any] = self._call(self._client.claim, worker, max_jobs, lease_s, wait_s)
        return out

    def complete_many(self, items: Iterable[tuple[str, Any]]) -> list[Any]:
        out: list[Any] = self._call(self._client.complete_many, list(items))
        return out

    def fail_many(self, items: Iterable[tuple[str, str, float | None]]) -> list[Any]:
        out: list[Any] = self._call(self._client.fail_many, list(items))
        return out

    def create(self, **settings: Any) -> dict[str, Any]:
        out: dict[str, Any] = self._call(self._client.create, **settings)
        return out

    def close(self) -> None:
        self._client.close()


def native_multi_url() -> bool:
    """True if this checkout's ``QueueClient`` accepts a list of broker URLs."""
    try:
        cast(Any, QueueClient)(["http://127.0.0.1:1", "http://127.0.0.1:2"], QUEUE).close()
    except (AttributeError, TypeError, ValueError):
        return False
    return True


def make_client(mode: str, urls: Sequence[str], *, store: str, timeout_s: float,
                retry_s: float, start: int = 0) -> Client:
    """A client of the queue given every broker URL (see --client-mode)."""
    if mode == "native":
        ordered = list(urls[start % len(urls):]) + list(urls[:start % len(urls)])
        client: Client = cast(Any, QueueClient)(ordered, QUEUE, store=store,
                                                timeout_s=timeout_s, retry_s=retry_s)
        return client
    return RotatingClient(urls, QUEUE, store=store, timeout_s=timeout_s, retry_s=retry_s,
                          start=start)


def error_code(exc: BaseException) -> str:
    if isinstance(exc, OsqueueError):
        return exc.code
    return type(exc).__name__


# ---------------------------------------------------------------------------------------
# what the clients saw
# ---------------------------------------------------------------------------------------

@dataclass
class Completion:
    token: str
    job_id: str
    worker: str
    ok: bool
    reason: str | None
    t: float
    late: bool = False


class Recorder:
    """Everything the clients saw, for the checker and the availability figures.
    Times are seconds since the run started."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.acked: dict[str, str] = {}          # payload key -> acknowledged job id
        self.acked_t: dict[str, float] = {}      # payload key -> when acknowledged
        self.claims: dict[str, list[tuple[str, str, float]]] = {}  # job -> (token, worker, t)
        self.attempted: set[str] = set()         # payload keys of pushes that raised
        self.ack_conflicts: list[dict[str, Any]] = []
        self.completions: list[Completion] = []
        self.complete_unknown: list[dict[str, Any]] = []
        self.ok_completed: set[str] = set()
        self.successes: list[tuple[float, float]] = []  # (call started, answered)
        self.counts: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()
        self.error_samples: dict[str, str] = {}
        self.claimed_after_complete: list[dict[str, Any]] = []
        self.claim_mismatch: list[dict[str, Any]] = []
        self.finished = 0  # ok completions (for the backlog estimate)
        self.push_failures: list[dict[str, Any]] = []

    def progress(self, started: float) -> None:
        self.successes.append((started, self.clock()))  # list.append is atomic

    def error(self, op: str, exc: BaseException) -> None:
        key = f"{op}:{error_code(exc)}"
        with self.lock:
            self.errors[key] += 1
            self.error_samples.setdefault(key, str(exc)[:300])

    def pushed(self, keys_: list[str], ids: list[str], started: float) -> None:
        with self.lock:
            for k, job_id in zip(keys_, ids, strict=True):
                old = self.acked.get(k)
                if old is not None and old != job_id:
                    self.ack_conflicts.append({"payload": k, "first": old, "again": job_id})
                self.acked[k] = job_id
                self.acked_t.setdefault(k, self.clock())
                self.attempted.discard(k)
            self.counts["push_ok"] += 1
            self.counts["jobs_acked_answers"] += len(ids)
        self.progress(started)

    def push_failed(self, keys_: list[str], exc: BaseException | None = None) -> None:
        with self.lock:
            self.push_failures.append({"t": round(self.clock(), 3), "first": keys_[0],
                                       "jobs": len(keys_),
                                       "error": None if exc is None else str(exc)[:200]})
            for k in keys_:
                if k not in self.acked:
                    self.attempted.add(k)
            self.counts["push_failed"] += 1

    def backlog(self) -> int:
        return len(self.acked) - self.finished

    def claimed(self, jobs: list[Any], worker: str, started: float) -> None:
        with self.lock:
            self.counts["claims_with_jobs"] += 1
            self.counts["jobs_claimed"] += len(jobs)
            t = self.clock()
            for j in jobs:
                self.claims.setdefault(j.id, []).append((j.token, worker, t))
                if j.id in self.ok_completed and len(self.claimed_after_complete) < 1000:
                    self.claimed_after_complete.append(
                        {"job": j.id, "token": j.token, "worker": worker, "t": self.clock()})
                k = payload_key(j.payload)
                if k is not None and k in self.acked and self.acked[k] != j.id:
                    self.claim_mismatch.append({"job": j.id, "payload": k,
                                                "acked_id": self.acked[k]})
        self.progress(started)

    def completed(self, items: list[tuple[str, str]], results: list[Any], worker: str,
                  started: float, late: bool = False) -> None:
        t = self.clock()
        any_ok = False
        with self.lock:
            for (token, job_id), r in zip(items, results, strict=True):
                ok = bool(r.ok)
                any_ok = any_ok or ok
                self.completions.append(Completion(token, job_id, worker, ok, r.reason, t,
                                                   late))
                if ok:
                    self.ok_completed.add(job_id)
                    self.finished += 1
                    self.counts["complete_ok"] += 1
                else:
                    self.counts["complete_stale"] += 1
        if any_ok:
            self.progress(started)

    def complete_failed(self, items: list[tuple[str, str]], worker: str) -> None:
        with self.lock:
            for token, job_id in items:
                self.complete_unknown.append({"token": token, "job": job_id, "worker": worker,
                                              "t": self.clock()})
            self.counts["complete_unknown"] += len(items)


def payload_key(payload: Any) -> str | None:
    if isinstance(payload, dict) and isinstance(payload.get("p"), int) \
            and isinstance(payload.get("n"), int):
        return f"{payload['p']}:{payload['n']}"
    return None


class RateLimiter:
    """Hands out ``rate`` tokens per second (a burst of at most one second's worth)."""

    def __init__(self, rate: float) -> None:
        self.rate = max(rate, 0.001)
        self.tokens = 0.0
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def wait(self, n: int, stop: threading.Event) -> bool:
        """Block until ``n`` tokens were taken (True) or ``stop`` is set (False)."""
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate)
            self.last = now
            self.tokens -= n
            deficit = -self.tokens
        if deficit > 0:
            return not stop.wait(deficit / self.rate)
        return not stop.is_set()


# ---------------------------------------------------------------------------------------
# producer and consumer threads
# ---------------------------------------------------------------------------------------

class Workers:
    """Producer and consumer threads (see the module docstring)."""

    def __init__(self, args: argparse.Namespace, urls: list[str], store_url: str,
                 mode: str, rec: Recorder, run_tag: str) -> None:
        self.args = args
        self.urls = urls
        self.store_url = store_url
        self.mode = mode
        self.rec = rec
        self.run_tag = run_tag
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.draining = threading.Event()
        self.limiter = RateLimiter(args.push_rate)
        self.threads: list[threading.Thread] = []
        self.crashes: list[str] = []

    def _client(self, start: int) -> Client:
        return make_client(self.mode, self.urls, store=self.store_url,
                           timeout_s=self.args.client_timeout_s,
                           retry_s=self.args.client_retry_s, start=start)

    def start(self) -> None:
        for i in range(self.args.producers):
            self.threads.append(threading.Thread(target=self._guard, args=(self.produce, i),
                                                 name=f"producer-{i}", daemon=True))
        for i in range(self.args.consumers):
            self.threads.append(threading.Thread(target=self._guard, args=(self.consume, i),
                                                 name=f"consumer-{i}", daemon=True))
        for t in self.threads:
            t.start()

    def _guard(self, fn: Callable[[int], None], i: int) -> None:
        try:
            fn(i)
        except BaseException:
            self.crashes.append(f"{threading.current_thread().name}: "
                                f"{traceback.format_exc()[-2000:]}")

    def join_producers(self, timeout_s: float) -> list[str]:
        """Join the producer threads within ``timeout_s`` s; the names still running."""
        deadline = time.monotonic() + timeout_s
        producers = [t for t in self.threads if t.name.startswith("producer")]
        for t in producers:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in producers if t.is_alive()]

    def join(self, timeout_s: float) -> list[str]:
        """Join every thread within ``timeout_s`` s in all; the names still running."""
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive()]

    # -- producers ---------------------------------------------------------------------
    def produce(self, i: int) -> None:
        args, rec = self.args, self.rec
        rng = random.Random(f"{args.seed}-producer-{i}")
        client = self._client(i)
        pad = "x" * args.pad_bytes if args.pad_bytes > 0 else None
        counter = 0
        retry: list[dict[str, Any]] | None = None
        tries = 0
        try:
            # after the stop, a failed keyed batch is still pushed again (until it is
            # acknowledged or it failed 20 times), so its fate is known before the drain
            while not self.stop_producing.is_set() or retry is not None:
                if retry is None:
                    while rec.backlog() > args.max_backlog and \
                            not self.stop_producing.wait(0.2):
                        pass
                    n = rng.randint(1, 50)
                    if not self.limiter.wait(n, self.stop_producing):
                        break
                    batch = []
                    for _ in range(n):
                        payload: dict[str, Any] = {"p": i, "n": counter}
                        if pad is not None:
                            payload["pad"] = pad
                        job: dict[str, Any] = {"payload": payload}
                        if args.push_keys:
                            job["key"] = f"{self.run_tag}-{i}-{counter}"
                        batch.append(job)
                        counter += 1
                    tries = 0
                else:
                    batch, retry = retry, None
                    tries += 1
                pkeys = [f"{i}:{j['payload']['n']}" for j in batch]
                started = rec.clock()
                try:
                    ids = client.push_many(batch, batch_size=len(batch))
                except Exception as exc:
                    rec.error("push", exc)
                    rec.push_failed(pkeys, exc)
                    if args.push_keys and tries < 20:
                        retry = batch  # the same jobs, the same keys
                    time.sleep(rng.uniform(0.05, 0.3))
                    continue
                if len(ids) != len(batch):
                    rec.error("push", RuntimeError(f"{len(batch)} jobs, {len(ids)} ids"))
                    rec.push_failed(pkeys)
                    continue
                rec.pushed(pkeys, list(ids), started)
        finally:
            client.close()

    # -- consumers -------------------------------------------------------------------------
    def consume(self, i: int) -> None:
        args, rec = self.args, self.rec
        rng = random.Random(f"{args.seed}-consumer-{i}")
        worker = f"w{i}"
        client = self._client(args.producers + i)
        late: list[tuple[float, Any]] = []  # (monotonic due, job) lapsed, completed late
        try:
            while not self.stop_consuming.is_set():
                now = time.monotonic()
                due = [j for t, j in late if t <= now]
                if due:
                    late = [(t, j) for t, j in late if t > now]
                    self._complete(client, worker, due, rng, late=True)
                started = rec.clock()
                try:
                    jobs = client.claim(worker, max_jobs=rng.randint(1, args.claim_max),
                                        lease_s=args.job_lease_s, wait_s=args.claim_wait_s)
                except Exception as exc:
                    rec.error("claim", exc)
                    self.stop_consuming.wait(rng.uniform(0.05, 0.3))
                    continue
                if not jobs:
                    continue
                rec.claimed(jobs, worker, started)
                draining = self.draining.is_set()
                completes, fails = [], []
                for j in jobs:
                    r = rng.random()
                    if not draining and r < args.lapse_prob:
                        with rec.lock:
                            rec.counts["lapsed"] += 1
                        if rng.random() < 0.5:
                            late.append((time.monotonic() + args.job_lease_s + 1.0, j))
                    elif not draining and r < args.lapse_prob + args.fail_prob:
                        fails.append(j)
                    else:
                        completes.append(j)
                if completes:
                    self._complete(client, worker, completes, rng)
                if fails:
                    self._fail(client, fails, rng)
        finally:
            client.close()

    def _complete(self, client: Client, worker: str, jobs: list[Any], rng: random.Random,
                  late: bool = False) -> None:
        items = [(j.token, j.id) for j in jobs]
        body = [(j.token, {"by": worker, "token": j.token}) for j in jobs]
        for attempt in range(3):
            started = self.rec.clock()
            try:
                results = client.complete_many(body)
            except Exception as exc:
                self.rec.error("complete", exc)
                if attempt == 2 or self.stop_consuming.is_set():
                    self.rec.complete_failed(items, worker)
                    return
                self.stop_consuming.wait(rng.uniform(0.05, 0.3))
                continue
            self.rec.completed(items, list(results), worker, started, late=late)
            return

    def _fail(self, client: Client, jobs: list[Any], rng: random.Random) -> None:
        try:
            results = client.fail_many([(j.token, "chaos: injected failure", 0.0)
                                        for j in jobs])
        except Exception as exc:
            self.rec.error("fail", exc)
            return
        with self.rec.lock:
            for r in results:
                self.rec.counts["fail_ok" if r.ok else "fail_stale"] += 1


# ---------------------------------------------------------------------------------------
# the nemesis
# ---------------------------------------------------------------------------------------

@dataclass
class Event:
    at_s: float
    kind: str  # kill | pause | compete
    params: dict[str, Any] = field(default_factory=dict)


def make_schedule(args: argparse.Namespace) -> list[Event]:
    """The nemesis events, from ``--seed`` alone: kinds shuffled into equal slots of
    the chaos phase, each at a random point in the first part of its slot."""
    rng = random.Random(f"{args.seed}-nemesis")
    kinds = ["kill"] * args.kills + ["pause"] * args.pauses + ["compete"] * args.competitors
    rng.shuffle(kinds)
    slot = args.seconds / max(1, len(kinds))
    events = []
    for n, kind in enumerate(kinds):
        at = n * slot + slot * rng.uniform(0.1, 0.35)
        params: dict[str, Any]
        if kind == "kill":
            params = {"restart_after_s": round(rng.uniform(args.restart_min_s,
                                                           args.restart_max_s), 3)}
        elif kind == "pause":
            params = {"hold_s": round(args.lease_s + rng.uniform(args.pause_extra_min_s,
                                                                 args.pause_extra_max_s), 3)}
        else:
            params = {"for_s": round(min(30.0, max(3.0, slot * rng.uniform(0.3, 0.55))), 3),
                      "stop_with": rng.choice(["SIGTERM", "SIGKILL"])}
        events.append(Event(round(at, 3), kind, params))
    return events


class Nemesis:
    """Runs the schedule in a thread; restarts run in their own threads so the
    schedule keeps time. Every action is logged with its time (s since start)."""

    def __init__(self, args: argparse.Namespace, slots: list[BrokerSlot],
                 competitor: BrokerSlot, direct: ObjectStore, clock: Callable[[], float],
                 say: Callable[[str], None]) -> None:
        self.args = args
        self.slots = slots
        self.competitor = competitor
        self.direct = direct
        self.clock = clock
        self.say = say
        self.log: list[dict[str, Any]] = []
        self.kills: list[dict[str, Any]] = []
        self.pauses: list[dict[str, Any]] = []
        self.competes: list[dict[str, Any]] = []
        self._heap: list[tuple[float, int, str, Callable[[], None]]] = []
        self._seq = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._helpers: list[threading.Thread] = []
        self._thread: threading.Thread | None = None
        self.crashes: list[str] = []

    def note(self, action: str, **fields: Any) -> dict[str, Any]:
        entry = {"t": round(self.clock(), 3),
                 "at": time.strftime("%H:%M:%S", time.localtime()), "action": action, **fields}
        with self._lock:
            self.log.append(entry)
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        self.say(f"nemesis {action} {extra}")
        return entry

    def at(self, t: float, name: str, fn: Callable[[], None]) -> None:
        with self._lock:
            self._seq += 1
            heapq.heappush(self._heap, (t, self._seq, name, fn))

    def owner(self) -> tuple[BrokerSlot | None, str | None]:
        """The slot whose URL the queue object names as its broker (and that URL)."""
        try:
            raw = read_state_raw(self.direct)
        except OsqueueError as exc:
            self.say(f"nemesis: cannot read the owner: {exc}")
            return None, None
        url = ((raw or {}).get("broker") or {}).get("url")
        for slot in [*self.slots, self.competitor]:
            if url and slot.url == url.rstrip("/"):
                return slot, url
        return None, url

    def start(self, schedule: list[Event], chaos_start: float) -> None:
        for ev in schedule:
            self.at(chaos_start + ev.at_s, ev.kind, self._action(ev))
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._thread.start()

    def _action(self, ev: Event) -> Callable[[], None]:
        if ev.kind == "kill":
            return lambda: self._kill(ev)
        if ev.kind == "pause":
            return lambda: self._pause(ev)
        return lambda: self._compete(ev)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                item = self._heap[0] if self._heap else None
            if item is None:
                self._stop.wait(0.2)
                continue
            delay = item[0] - self.clock()
            if delay > 0:
                self._stop.wait(min(delay, 0.2))
                continue
            with self._lock:
                heapq.heappop(self._heap)
            try:
                item[3]()
            except Exception:
                self.crashes.append(traceback.format_exc()[-2000:])
                self.say(f"nemesis action {item[2]} crashed: {traceback.format_exc()[-500:]}")

    def stop(self) -> None:
        """Stop running actions (the heal puts everything right afterwards)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for t in self._helpers:
            t.join(self.args.broker_start_timeout_s * 2)
        with self._lock:
            left = [name for _, _, name, _ in self._heap]
            self._heap.clear()
        if left:
            self.note("cancelled", pending=left)

    def _restart_later(self, slot: BrokerSlot, after_s: float, why: str) -> None:
        def go() -> None:
            if self._stop.wait(after_s):
                return
            ok = slot.start(self.args.broker_start_timeout_s)
            self.note("restarted" if ok else "restart_failed", slot=slot.name, why=why,
                      pid=slot.pid)

        t = threading.Thread(target=go, name=f"restart-{slot.name}", daemon=True)
        self._helpers.append(t)
        t.start()

    def _target(self, what: str) -> tuple[BrokerSlot | None, bool, str | None]:
        """The owner's slot (True) or, with no live owner to hit, a live main broker."""
        slot, url = self.owner()
        if slot is not None and slot.alive() and not slot.paused:
            return slot, True, url
        live = [s for s in self.slots if s.alive() and not s.paused]
        if not live:
            return None, False, url
        rng = random.Random(f"{self.args.seed}-{what}-{len(self.log)}")
        return rng.choice(live), False, url

    def _kill(self, ev: Event) -> None:
        slot, is_owner, url = self._target("kill")
        if slot is None:
            self.note("kill_skipped", reason="no live broker", owner_url=url)
            return
        pid = slot.pid
        t = self.clock()
        if not slot.kill():
            self.note("kill_skipped", slot=slot.name, reason="not running")
            return
        entry = self.note("kill", slot=slot.name, pid=pid, owner=is_owner, owner_url=url,
                          restart_after_s=ev.params["restart_after_s"])
        self.kills.append({"t": t, "slot": slot.name, "owner": is_owner, "log": entry})
        if slot is self.competitor:
            return  # a competitor is not restarted
        self._restart_later(slot, ev.params["restart_after_s"], "after kill")

    def _pause(self, ev: Event) -> None:
        slot, is_owner, url = self._target("pause")
        if slot is None:
            self.note("pause_skipped", reason="no live broker", owner_url=url)
            return
        t = self.clock()
        if not slot.signal(signal.SIGSTOP):
            self.note("pause_skipped", slot=slot.name, reason="not running")
            return
        gen = slot.generation
        hold = float(ev.params["hold_s"])
        entry = self.note("pause", slot=slot.name, pid=slot.pid, owner=is_owner, owner_url=url,
                          hold_s=hold)
        self.pauses.append({"t": t, "slot": slot.name, "owner": is_owner, "hold_s": hold,
                            "log": entry})

        def resume() -> None:
            if slot.generation == gen and slot.signal(signal.SIGCONT):
                self.note("resume", slot=slot.name, pid=slot.pid)

        self.at(t + hold, "resume", resume)

    def _compete(self, ev: Event) -> None:
        slot = self.competitor
        if slot.alive():
            self.note("compete_skipped", reason="a competitor is still running")
            return
        entry = self.note("compete_start", slot=slot.name, for_s=ev.params["for_s"])
        t = self.clock()
        record = {"t": t, "for_s": ev.params["for_s"], "log": entry, "started": False}
        self.competes.append(record)

        def run() -> None:
            ok = slot.start(self.args.broker_start_timeout_s, attempts=2)
            record["started"] = ok
            self.note("compete_ready" if ok else "compete_failed", slot=slot.name,
                      pid=slot.pid)
            if ok:
                self.at(t + float(ev.params["for_s"]), "compete_stop",
                        lambda: self._compete_stop(ev))

        th = threading.Thread(target=run, name="competitor", daemon=True)
        self._helpers.append(th)
        th.start()

    def _compete_stop(self, ev: Event) -> None:
        slot = self.competitor
        if not slot.alive():
            self.note("compete_stop_skipped", reason="not running")
            return
        how = ev.params["stop_with"]
        pid = slot.pid
        code: int | None
        if how == "SIGKILL":
            slot.kill()
            code = -9
        else:
            code = slot.terminate(30.0)
        self.note("compete_stop", slot=slot.name, pid=pid, signal=how, exit=code)


# ---------------------------------------------------------------------------------------
# drain and check
# ---------------------------------------------------------------------------------------

def status_counts(store: ObjectStore) -> dict[str, int] | None:
    raw = read_state_raw(store)
    if raw is None:
        return None
    counts: collections.Counter[str] = collections.Counter(j.get("status")
                                                           for j in raw.get("jobs", []))
    return dict(counts)


def drain(workers: Workers, direct: ObjectStore, timeout_s: float, clock: Callable[[], float],
          say: Callable[[str], None]) -> dict[str, Any]:
    """Let consumers run until no job is pending or claimed; the outcome and timing."""
    workers.draining.set()
    t0 = clock()
    deadline = time.monotonic() + timeout_s
    last: dict[str, int] | None = None
    last_say = 0.0
    while time.monotonic() < deadline:
        try:
            last = status_counts(direct)
        except OsqueueError as exc:
            say(f"drain: cannot read the queue object: {exc}")
            last = None
        if last is not None and not last.get("pending") and not last.get("claimed") \
                and not last.get("staged"):
            return {"finished": True, "seconds": round(clock() - t0, 3), "left": last}
        if time.monotonic() - last_say > 10:
            say(f"drain: {last}")
            last_say = time.monotonic()
        time.sleep(1.0)
    return {"finished": False, "seconds": round(clock() - t0, 3), "left": last}


def dump_store(store: ObjectStore, into: Path) -> int:
    """Copy every object of ``store`` to files under ``into``; how many."""
    object_keys = store.list("")

    def copy(key: str) -> None:
        path = into.joinpath(*key.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get(key))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(copy, object_keys))
    return len(object_keys)


class _Snapshot:
    """The archive objects of a store, fetched once (in parallel) and served from
    memory to ``broker.archive``'s readers (they need only ``list`` and ``get``)."""

    def __init__(self, store: ObjectStore) -> None:
        self.url = store.url
        self.keys = archive.list_objects(store, QUEUE)
        with ThreadPoolExecutor(8) as pool:
            self.data = dict(zip(self.keys, pool.map(store.get, self.keys), strict=True))

    def list(self, prefix: str) -> list[str]:
        return [k for k in self.keys if k.startswith(prefix)]

    def get(self, key: str) -> bytes:
        try:
            return self.data[key]
        except KeyError:
            raise NotFound(f"no object {key!r}") from None


def line_token(line: dict[str, Any]) -> str | None:
    """The token a completion was made with: the line's own ``token`` field where the
    archive has one, else the one our consumers put in the result."""
    token = line.get("token")
    if token is None and isinstance(line.get("result"), dict):
        token = line["result"].get("token")
    return None if token is None else str(token)


def check_store(store: ObjectStore, rec: Recorder, samples: int = 20) -> dict[str, Any]:
    """The total-queue check: what the store holds against what clients were told.

    The archive is read twice over the same bytes: line by line across every object
    ("raw"), and as ``broker.archive.read_all`` shows it (the reader's view, which
    may leave out lines it knows to be orphans). Presence, doubles and tokens are
    judged on the reader's view; the raw figures are reported beside them. A job in
    the queue object with status ``completed`` (a layout that archives after the
    commit) counts as completed with its lease's token and worker.
    """
    out: dict[str, Any] = {}
    try:
        got = store.read(keys.state_key(QUEUE))
    except NotFound:
        got = None
    queue_jobs: dict[str, dict[str, Any]] = {}  # id -> the job, plain
    if got is not None:
        try:
            state = S.decode(got.data)
        except OsqueueError as exc:
            out["state_error"] = str(exc)
            state = None
        if state is not None:
            for stored in state.jobs.values():
                plain = stored.to_plain()
                queue_jobs[str(plain["id"])] = plain
            out["queue_seq"] = state.seq
            out["queue_broker"] = None if state.broker is None else {
                "id": state.broker.id, "url": state.broker.url}
    snap = _Snapshot(store)
    raw: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for key in snap.keys:
        for line in archive.decode_records(snap.data[key]):
            raw[str(line.get("id"))].append({**line, "_object": key})
    view: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for line in archive.read_all(cast(Any, snap), QUEUE):
        view[str(line.get("id"))].append(line)
    out["archive_objects"] = len(snap.keys)
    out["archive_lines"] = sum(len(v) for v in raw.values())
    out["archive_lines_read"] = sum(len(v) for v in view.values())
    out["queue_jobs_left"] = dict(collections.Counter(j.get("status")
                                                      for j in queue_jobs.values()))

    # where each job is recorded completed: (token, worker, where)
    done: dict[str, list[tuple[str | None, str | None, str]]] = collections.defaultdict(list)
    for job_id, ls in view.items():
        for line in ls:
            done[job_id].append((line_token(line), line.get("worker"), "archive"))
    for job_id, job in queue_jobs.items():
        if job.get("status") == "completed" and job_id not in view:
            lease = job.get("lease") or {}
            done[job_id].append((lease.get("token"), lease.get("worker"), "queue"))

    # payload -> job ids across queue and archive (reader's view)
    by_payload: dict[str, set[str]] = collections.defaultdict(set)
    held: dict[str, set[str]] = collections.defaultdict(set)  # job id -> payload keys
    foreign: list[dict[str, Any]] = []
    for job_id, job in queue_jobs.items():
        k = payload_key(job.get("payload"))
        if k is None:
            foreign.append({"job": job_id, "where": "queue", "payload": str(job)[:200]})
        else:
            by_payload[k].add(job_id)
            held[job_id].add(k)
    for job_id, ls in view.items():
        for line in ls:
            k = payload_key(line.get("payload"))
            if k is None:
                foreign.append({"job": job_id, "where": "archive",
                                "payload": str(line.get("payload"))[:200]})
            else:
                by_payload[k].add(job_id)
                held[job_id].add(k)

    by_job: dict[str, list[Completion]] = collections.defaultdict(list)
    for c in rec.completions:
        by_job[c.job_id].append(c)

    def history(job_id: str) -> dict[str, Any]:
        """What the clients saw of one job (claims, complete answers) and where the
        store holds it."""
        return {"claims": [{"token": t, "worker": w, "t": round(at, 3)}
                           for t, w, at in rec.claims.get(job_id, [])],
                "completes": [{"token": c.token, "ok": c.ok, "reason": c.reason,
                               "t": round(c.t, 3), "late": c.late}
                              for c in by_job.get(job_id, [])],
                "queue_status": (queue_jobs.get(job_id) or {}).get("status"),
                "archive_objects": [ln["_object"] for ln in raw.get(job_id, [])]}

    acked, attempted = rec.acked, rec.attempted
    # lost: acknowledged, and no job with that id holds that payload anywhere
    lost = [{"payload": k, "id": i, "acked_t": round(rec.acked_t.get(k, -1.0), 3),
             **history(i)}
            for k, i in acked.items() if k not in held.get(i, set())]
    unfinished = sorted(i for i in acked.values()
                        if (queue_jobs.get(i) or {}).get("status") in ("pending", "claimed"))
    # duplicated: one payload, several jobs
    dup = {k: sorted(ids) for k, ids in by_payload.items() if len(ids) > 1}
    # unexpected: never pushed, or not under the acknowledged id
    never_pushed = [{"payload": k, "jobs": sorted(ids)} for k, ids in by_payload.items()
                    if k not in acked and k not in attempted]
    wrong_id = [{"payload": k, "acked_id": acked[k], "jobs": sorted(ids)}
                for k, ids in by_payload.items() if k in acked and ids != {acked[k]}]
    # double: one job id on several archive lines, as the reader shows them (and raw)
    double = {i: [{"worker": ln.get("worker"), "token": line_token(ln),
                   "completed_at": ln.get("completed_at")} for ln in ls]
              for i, ls in view.items() if len(ls) > 1}
    double_raw = {i: [{"object": ln["_object"], "worker": ln.get("worker"),
                       "token": line_token(ln), "completed_at": ln.get("completed_at")}
                      for ln in ls]
                  for i, ls in raw.items() if len(ls) > 1}
    both = sorted(i for i in view if (queue_jobs.get(i) or {}).get("status")
                  not in (None, "completed"))
    # superseded: an ok complete whose token is not the one the job was completed with
    superseded: dict[str, list[dict[str, Any]]] = {"other_token": [], "still_queued": [],
                                                   "vanished": []}
    stale_but_landed = []
    for c in rec.completions:
        records = done.get(c.job_id, [])
        tokens = {t for t, _, _ in records}
        if c.ok:
            entry = {"job": c.job_id, "token": c.token, "worker": c.worker, "t": round(c.t, 3),
                     "late": c.late}
            if not records:
                kind = "still_queued" if c.job_id in queue_jobs else "vanished"
                superseded[kind].append({**entry, **history(c.job_id)})
            elif c.token not in tokens or c.worker not in {w for _, w, _ in records}:
                superseded["other_token"].append(
                    {**entry, "recorded": [{"token": t, "worker": w, "where": where}
                                           for t, w, where in records]})
        elif c.token in tokens:
            stale_but_landed.append({"job": c.job_id, "token": c.token, "reason": c.reason})
    n_sup = sum(len(v) for v in superseded.values())
    out.update({
        "acked": len(acked),
        "acked_unfinished": len(unfinished),
        "attempted_not_acked": len(attempted),
        "lost": len(lost),
        "duplicated": sum(len(ids) - 1 for ids in dup.values()),
        "duplicated_payloads": len(dup),
        "unexpected": len(foreign) + len(never_pushed) + len(wrong_id),
        "unexpected_detail": {"foreign_payload": len(foreign), "never_pushed": len(never_pushed),
                              "wrong_id": len(wrong_id)},
        "superseded": n_sup,
        "superseded_detail": {k: len(v) for k, v in superseded.items()},
        "double": len(double),
        "double_raw_lines": len(double_raw),
        "archived_and_queued": len(both),
        "stale_answer_but_landed": len(stale_but_landed),
        "ack_conflicts": len(rec.ack_conflicts),
        "samples": {
            "lost": lost[:samples],
            "acked_unfinished": unfinished[:samples],
            "duplicated": dict(list(dup.items())[:samples]),
            "foreign_payload": foreign[:samples],
            "never_pushed": never_pushed[:samples],
            "wrong_id": wrong_id[:samples],
            "superseded": {k: v[:samples] for k, v in superseded.items()},
            "double": {i: {"lines": v, **history(i)}
                       for i, v in list(double.items())[:samples]},
            "double_raw_lines": dict(list(double_raw.items())[:samples]),
            "archived_and_queued": both[:samples],
            "stale_answer_but_landed": stale_but_landed[:samples],
            "ack_conflicts": rec.ack_conflicts[:samples],
        },
    })
    return out


# ---------------------------------------------------------------------------------------
# availability
# ---------------------------------------------------------------------------------------

def availability(successes: list[tuple[float, float]], start: float, end: float,
                 kills: list[dict[str, Any]], pauses: list[dict[str, Any]]) -> dict[str, Any]:
    """Longest window without progress in [start, end] and the outage after each kill
    and pause, all in seconds.

    ``successes`` are (call started, answered) of the calls that made progress. The
    outage after an event at t runs to the first answer of a call that STARTED at
    or after t (an answer already on its way at t proves nothing about recovery);
    ``first_answer_s`` is the time to any answer after t, for comparison.
    """
    ends = sorted(e for _, e in successes)
    inside = [t for t in ends if start <= t <= end]
    points = [start, *inside, end]
    longest, at = 0.0, start
    for a, b in itertools.pairwise(points):
        if b - a > longest:
            longest, at = b - a, a
    by_start = sorted(successes)
    starts = [s for s, _ in by_start]
    suffix_min = [0.0] * len(by_start)
    best = float("inf")
    for i in range(len(by_start) - 1, -1, -1):
        best = min(best, by_start[i][1])
        suffix_min[i] = best

    def outage(t: float) -> float | None:
        i = bisect.bisect_left(starts, t)
        return None if i >= len(starts) else round(suffix_min[i] - t, 3)

    def first_answer(t: float) -> float | None:
        i = bisect.bisect_right(ends, t)
        return None if i >= len(ends) else round(ends[i] - t, 3)

    kill_outages = [{"t": round(k["t"], 3), "slot": k["slot"], "owner": k["owner"],
                     "outage_s": outage(k["t"]), "first_answer_s": first_answer(k["t"])}
                    for k in kills]
    pause_outages = [{"t": round(p["t"], 3), "slot": p["slot"], "hold_s": p["hold_s"],
                      "outage_s": outage(p["t"]), "first_answer_s": first_answer(p["t"])}
                     for p in pauses]
    kill_values = [k["outage_s"] for k in kill_outages if k["owner"]]
    return {
        "progress_events": len(inside),
        "longest_gap_s": round(longest, 3),
        "longest_gap_at_s": round(at, 3),
        "max_outage_after_owner_kill_s": None if not kill_values else
        (None if any(v is None for v in kill_values) else max(kill_values)),
        "kill_outages": kill_outages,
        "pause_outages": pause_outages,
    }


# ---------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------

class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.run_dir = Path(args.run_dir or tempfile.mkdtemp(
            prefix=f"osq-chaos-{args.store}-{args.seed}-")).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        CHILDREN.pid_file = self.run_dir / "children.txt"
        self._say_lock = threading.Lock()
        self.slots: list[BrokerSlot] = []
        self.competitor: BrokerSlot | None = None
        self.store = StoreSetup(args, self.run_dir)
        self.result: dict[str, Any] = {}

    def clock(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        with self._say_lock:
            print(f"[{self.clock():8.2f}s] {text}", flush=True)

    def execute(self) -> int:
        args = self.args
        schedule = make_schedule(args)
        self.say(f"run directory {self.run_dir}")
        self.say("schedule (seconds into the chaos phase): " + "; ".join(
            f"{e.at_s:.1f} {e.kind} {e.params}" for e in schedule))
        slot_need = max((args.lease_s + args.pause_extra_max_s + 2) if args.pauses else 0,
                        args.restart_max_s + 3 if args.kills else 0)
        if schedule and args.seconds / len(schedule) < slot_need:
            self.say(f"warning: {len(schedule)} events in {args.seconds:.0f}s leave "
                     f"{args.seconds / len(schedule):.1f}s each; they may overlap (want "
                     f">= {slot_need:.1f}s)")

        # -- setup ------------------------------------------------------------------------
        self.store.start()
        direct = open_store(self.store.direct_url)
        ports = pick_ports(args.brokers + 1)
        self.slots = [BrokerSlot(f"b{i}", ports[i], self.store.broker_url, args.lease_s,
                                 args.broker_log_level, self.run_dir, self.clock, self.say)
                      for i in range(args.brokers)]
        self.competitor = BrokerSlot("c", ports[-1], self.store.broker_url, args.lease_s,
                                     args.broker_log_level, self.run_dir, self.clock, self.say)
        starters = [threading.Thread(target=s.start, args=(args.broker_start_timeout_s,),
                                     daemon=True) for s in self.slots]
        for t in starters:
            t.start()
        for t in starters:
            t.join(args.broker_start_timeout_s * 7)
        down = [s.name for s in self.slots if not s.alive()]
        if down:
            raise RuntimeError(f"brokers {down} did not start; see {self.run_dir}")
        urls = [s.url for s in self.slots]
        self.say(f"brokers ready: {urls} on {self.store.broker_url}")
        mode = args.client_mode
        if mode == "auto":
            mode = "native" if native_multi_url() else "rotate"
        self.say(f"client mode: {mode}")
        admin = make_client(mode, urls, store=self.store.direct_url,
                            timeout_s=args.client_timeout_s, retry_s=30.0)
        admin.create(max_attempts=args.max_attempts, backoff_base_s=0.2, backoff_max_s=2.0)
        admin.close()

        rec = Recorder(self.clock)
        workers = Workers(args, urls, self.store.direct_url, mode, rec, uuid.uuid4().hex[:8])
        nemesis = Nemesis(args, self.slots, self.competitor, direct, self.clock, self.say)

        # -- chaos ---------------------------------------------------------------------------
        chaos_start = self.clock()
        workers.start()
        if self.store.kind == "s3":
            self.store.faults(True)
            nemesis.note("faults_on", rate=args.fault_rate)
        nemesis.start(schedule, chaos_start)
        next_report = chaos_start + 10
        while self.clock() < chaos_start + args.seconds:
            time.sleep(0.2)
            if self.clock() >= next_report:
                next_report += 10
                self.say(f"acked {len(rec.acked)}, completed {rec.finished}, "
                         f"errors {sum(rec.errors.values())}")
        chaos_end = self.clock()

        # -- heal ----------------------------------------------------------------------------
        workers.stop_producing.set()
        nemesis.stop()
        if self.store.kind == "s3":
            self.store.faults(False)
            nemesis.note("faults_off")
        for s in self.slots:
            if s.paused:
                s.signal(signal.SIGCONT)
                nemesis.note("resume", slot=s.name, why="heal")
        if self.competitor.alive():
            code = self.competitor.terminate(30.0)
            nemesis.note("compete_stop", slot="c", signal="SIGTERM", exit=code, why="heal")
        for s in self.slots:
            if not s.alive():
                ok = s.start(args.broker_start_timeout_s)
                nemesis.note("restarted" if ok else "restart_failed", slot=s.name, why="heal")
        heal_t = self.clock()
        producers_left = workers.join_producers(
            20 * (args.client_timeout_s + args.client_retry_s + 0.3) + 10)
        if producers_left:
            self.say(f"warning: producers still pushing after the heal: {producers_left}")

        # -- drain ---------------------------------------------------------------------------
        drained = drain(workers, direct, args.drain_timeout_s, self.clock, self.say)
        self.say(f"drain: {drained}")
        workers.stop_consuming.set()
        stuck = workers.join(args.client_timeout_s * 4 + args.client_retry_s * 3 + 30)
        for s in [*self.slots, self.competitor]:
            s.terminate(30.0)
        stopped_t = self.clock()

        # -- check ---------------------------------------------------------------------------
        self.say("checking the store ...")
        for attempt in range(3):
            try:
                check = check_store(direct, rec)
                break
            except OsqueueError as exc:  # the runner's own reads see no injected faults
                if attempt == 2:
                    raise
                self.say(f"check: reading the store failed ({exc}); again")
                time.sleep(2)
        fault_stats = self.store.fault_stats()
        avail = availability(rec.successes, chaos_start, chaos_end, nemesis.kills,
                             nemesis.pauses)
        # -- figures -------------------------------------------------------------------------
        owner_kills = sum(1 for k in nemesis.kills if k["owner"])
        owner_pauses = sum(1 for p in nemesis.pauses if p["owner"])
        competitors = sum(1 for c in nemesis.competes if c["started"])
        failures = {name: check[name] for name in
                    ("lost", "duplicated", "unexpected", "superseded", "double")}
        if "state_error" in check:
            failures["state_unreadable"] = 1
        drained["acked_unfinished_at_check"] = check["acked_unfinished"]
        if check["acked_unfinished"]:
            drained["finished"] = False
        ok = not any(failures.values()) and drained["finished"]
        drop_landed = (fault_stats or {}).get("faults", {}).get("drop_landed", 0)
        fault_pct = (fault_stats or {}).get("fault_pct", 0.0)
        max_kill = avail["max_outage_after_owner_kill_s"]
        bar = {
            "acked": [check["acked"], args.bar_acked, check["acked"] >= args.bar_acked],
            "owner_kills": [owner_kills, args.bar_kills, owner_kills >= args.bar_kills],
            "owner_pauses_past_lease": [owner_pauses, args.bar_pauses,
                                        owner_pauses >= args.bar_pauses],
            "competing_brokers": [competitors, args.bar_competitors,
                                  competitors >= args.bar_competitors],
            "max_outage_after_kill_s": [max_kill, args.lease_s + args.bar_outage_extra_s,
                                        max_kill is not None and
                                        max_kill <= args.lease_s + args.bar_outage_extra_s],
        }
        if self.store.kind == "s3":
            bar["fault_pct"] = [round(fault_pct, 3), args.bar_fault_pct,
                                fault_pct >= args.bar_fault_pct]
            bar["dropped_landed_puts"] = [drop_landed, 1, drop_landed >= 1]
        starts = {s.name: {"starts": s.starts, "start_failures": s.start_failures}
                  for s in [*self.slots, self.competitor]}
        self.result = {
            "ok": ok,
            "failures": failures,
            "config": vars(args),
            "client_mode": mode,
            "store": {"kind": self.store.kind, "broker_url": self.store.broker_url,
                      "direct_url": self.store.direct_url},
            "brokers": {s.name: s.url for s in [*self.slots, self.competitor]},
            "timeline_s": {"chaos_start": round(chaos_start, 3), "chaos_end": round(chaos_end, 3),
                           "healed": round(heal_t, 3), "stopped": round(stopped_t, 3),
                           "total": round(self.clock(), 3)},
            "schedule": [vars(e) for e in schedule],
            "nemesis_log": nemesis.log,
            "figures": {
                "acked_jobs": check["acked"],
                "owner_kills": owner_kills,
                "kills_total": len(nemesis.kills),
                "owner_pauses_past_lease": owner_pauses,
                "pauses_total": len(nemesis.pauses),
                "competing_brokers": competitors,
                "broker_start_failures": sum(len(s.start_failures)
                                             for s in [*self.slots, self.competitor]),
                "client_counts": dict(rec.counts),
                "client_errors": dict(rec.errors),
                "client_error_samples": rec.error_samples,
                "claimed_after_ok_complete": len(rec.claimed_after_complete),
                "claim_payload_mismatch": len(rec.claim_mismatch),
            },
            "faults": fault_stats,
            "availability": avail,
            "drain": drained,
            "check": check,
            "bar": bar,
            "broker_starts": starts,
            "runner_problems": {"stuck_threads": stuck, "client_crashes": workers.crashes,
                                "nemesis_crashes": nemesis.crashes},
            "run_dir": str(self.run_dir),
        }
        self._write_records(rec)
        if self.store.kind == "s3" and (args.dump_store == "always"
                                        or (args.dump_store == "fail" and not ok)):
            n = dump_store(direct, self.run_dir / "store-dump")
            self.say(f"copied {n} objects of the S3 store to {self.run_dir / 'store-dump'}")
        self.print_summary()
        if not ok:
            return 1
        if args.require_bar and not all(v[2] for v in bar.values()):
            return 4
        return 0

    def _write_records(self, rec: Recorder) -> None:
        """The raw client records, for post-mortems (in the run directory)."""
        with open(self.run_dir / "records.json", "wb") as f:
            f.write(orjson.dumps({
                "acked": rec.acked, "acked_t": rec.acked_t, "attempted": sorted(rec.attempted),
                "claims": rec.claims,
                "completions": [vars(c) for c in rec.completions],
                "complete_unknown": rec.complete_unknown,
                "push_failures": rec.push_failures,
                "claimed_after_complete": rec.claimed_after_complete,
                "claim_mismatch": rec.claim_mismatch[:1000],
            }))

    def print_summary(self) -> None:
        r = self.result
        c, f, a = r["check"], r["figures"], r["availability"]
        lines = [
            "",
            f"=== chaos run: store={r['store']['kind']} seed={r['config']['seed']} "
            f"seconds={r['config']['seconds']} brokers={r['config']['brokers']} "
            f"lease={r['config']['lease_s']}s client={r['client_mode']} ===",
            f"jobs acknowledged      {c['acked']}  (attempted, not acknowledged: "
            f"{c['attempted_not_acked']})",
            f"completions ok/stale/unknown  {f['client_counts'].get('complete_ok', 0)} / "
            f"{f['client_counts'].get('complete_stale', 0)} / "
            f"{f['client_counts'].get('complete_unknown', 0)}",
            f"owner kills            {f['owner_kills']}  (kills in all {f['kills_total']})",
            f"pauses past the lease  {f['owner_pauses_past_lease']}  (in all "
            f"{f['pauses_total']})",
            f"competing brokers      {f['competing_brokers']}",
            f"broker start failures  {f['broker_start_failures']}",
        ]
        if r["faults"]:
            fs = r["faults"]
            lines.append(f"storage requests       {fs.get('requests')}  faulted "
                         f"{fs.get('faulted')} ({fs.get('fault_pct', 0):.2f}%): "
                         + ", ".join(f"{k} {v}" for k, v in (fs.get("faults") or {}).items()))
        kill_list = ", ".join(f"{k['outage_s']}" for k in a["kill_outages"])
        pause_list = ", ".join(f"{p['outage_s']}" for p in a["pause_outages"])
        lines += [
            f"longest window without progress  {a['longest_gap_s']}s "
            f"(at t={a['longest_gap_at_s']}s)",
            f"outage after owner kill: max {a['max_outage_after_owner_kill_s']}s; each: "
            f"[{kill_list}]",
            f"outage after pause: [{pause_list}]",
            f"drain                  {'finished' if r['drain']['finished'] else 'NOT FINISHED'}"
            f" in {r['drain']['seconds']}s; left {r['drain']['left']}",
            f"client errors          {sum(f['client_errors'].values())}: "
            + ", ".join(f"{k} {v}" for k, v in sorted(f["client_errors"].items())),
            "--- store check ---",
            f"lost {c['lost']}  duplicated {c['duplicated']}  unexpected {c['unexpected']} "
            f"{c['unexpected_detail']}  superseded {c['superseded']} {c['superseded_detail']}  "
            f"double {c['double']} (raw lines: {c['double_raw_lines']})",
            f"also: archived-and-still-queued {c['archived_and_queued']}, stale answers for "
            f"completions that landed {c['stale_answer_but_landed']}, claims of jobs already "
            f"completed ok {f['claimed_after_ok_complete']}, archive objects "
            f"{c['archive_objects']} ({c['archive_lines']} lines, "
            f"{c['archive_lines_read']} as read), left in queue {c['queue_jobs_left']}",
        ]
        if "state_error" in c:
            lines.append(f"QUEUE OBJECT UNREADABLE: {c['state_error']}")
        lines.append("--- bar (figure, wanted, met) ---")
        for name, (value, want, met) in r["bar"].items():
            lines.append(f"{name:28s} {value!s:>10} {want!s:>10} {'yes' if met else 'NO'}")
        problems = r["runner_problems"]
        if any(problems.values()):
            lines.append(f"RUNNER PROBLEMS: {problems}")
        lines.append(f"RESULT: {'PASS' if r['ok'] else 'FAIL'} {r['failures']}"
                     + ("" if r["drain"]["finished"] else " (drain not finished)"))
        print("\n".join(lines), flush=True)

    def cleanup(self, passed: bool) -> None:
        for s in [*self.slots, *([self.competitor] if self.competitor else [])]:
            if s.alive():
                s.terminate(10.0)
        self.store.stop()
        CHILDREN.kill_all()
        if passed and not self.args.keep_run_dir and not self.args.run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        else:
            print(f"run directory kept: {self.run_dir}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; a ``--preset`` supplies defaults that options override."""
    parser = build_parser()
    first = parser.parse_args(argv)
    if first.preset:
        parser.set_defaults(**PRESETS[first.preset])
        return parser.parse_args(argv)
    return first


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_args(args)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(name, value)  # moto's; the runner reads the store directly
    max_runtime = args.max_runtime_s or (args.seconds + args.drain_timeout_s + 300
                                         + 4 * args.broker_start_timeout_s)

    def watchdog() -> None:
        print(f"chaos: the run exceeded --max-runtime-s ({max_runtime:.0f}s); killing "
              "everything", file=sys.stderr, flush=True)
        CHILDREN.kill_all()
        os._exit(3)

    timer = threading.Timer(max_runtime, watchdog)
    timer.daemon = True
    timer.start()

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # only in the main thread
        signal.signal(signal.SIGTERM, on_term)
    run = Run(args)
    code = 2
    try:
        code = run.execute()
    except KeyboardInterrupt:
        print("chaos: interrupted", file=sys.stderr, flush=True)
        code = 130
    except Exception:
        print(f"chaos: the run failed: {traceback.format_exc()}", file=sys.stderr, flush=True)
        code = 2
    finally:
        timer.cancel()
        if args.out and run.result:
            Path(args.out).write_bytes(orjson.dumps(run.result, option=orjson.OPT_INDENT_2,
                                                    default=str))
        run.cleanup(passed=code == 0)
    return code


if __name__ == "__main__":
    sys.exit(main())
