"""Helpers shared by the benchmark scripts: timing, result files, and a moto S3
server in a child process."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def best_of(fn: Any, repeat: int = 5) -> float:
    """The fastest of ``repeat`` runs of ``fn()``, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` with machine facts to ``bench/results/<name>.json``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
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
