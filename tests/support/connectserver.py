"""A local Spark Connect server on 127.0.0.1, as its own process.

PySpark's ``SparkSession.builder.remote("local[...]")`` refuses to start while a
classic session runs in the same process, and the tests want one session of
each kind. So the server is a child process (a classic session with the Spark
Connect plugin, bound to loopback on a free port) and the tests' Connect
session is a pure gRPC client of it::

    server = ConnectServer().start()   # waits until it accepts sessions
    spark = server.session()           # a pyspark.sql.connect SparkSession
    ...
    server.stop()

As a script it prints ``connectserver ready on sc://127.0.0.1:PORT`` and serves
until its standard input closes::

    python -m tests.support.connectserver [--port 0] [--master local[2]]
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import threading
import time
from typing import Any

from tests.support.serving import free_port
from tests.support.spark_jvm import JAVA_OPTIONS

READY = "connectserver ready on "


class ConnectServer:
    """A child process serving Spark Connect on 127.0.0.1:``port``.

    ``start`` waits (up to ``start_timeout_s`` seconds) for the ready line and
    raises ``RuntimeError`` with the child's last output if it exits first.
    ``stop`` closes the child's stdin (it stops its session) and kills it
    after ``stop_timeout_s`` seconds.
    """

    def __init__(self, port: int = 0, master: str = "local[2]",
                 start_timeout_s: float = 180.0, stop_timeout_s: float = 30.0) -> None:
        self.port = port or free_port()
        self.master = master
        self.url = f"sc://127.0.0.1:{self.port}"
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        #: The server's last output lines (for diagnostics): read all along, since a
        #: full pipe would block the server's JVM on its next log or progress line.
        self.tail: collections.deque[str] = collections.deque(maxlen=200)

    def start(self) -> ConnectServer:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
                   PYSPARK_DRIVER_PYTHON=sys.executable)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.connectserver", "--port", str(self.port),
             "--master", self.master],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env,
        )
        assert self._proc.stdout is not None
        deadline = time.monotonic() + self._start_timeout_s
        for line in self._proc.stdout:
            if line.startswith(READY):
                threading.Thread(target=self._drain, args=(self._proc.stdout,),
                                 name="connectserver-output", daemon=True).start()
                return self
            self.tail.append(line.rstrip())
            if time.monotonic() > deadline:
                break
        self.stop()
        raise RuntimeError("the Spark Connect server did not start:\n"
                           + "\n".join(list(self.tail)[-20:]))

    def _drain(self, stream: Any) -> None:
        for line in stream:
            self.tail.append(line.rstrip())

    def session(self) -> Any:
        """A Connect client session (``pyspark.sql.connect.session.SparkSession``).

        Built with the Connect builder itself: the generic builder refuses a
        remote session while this process also runs a classic one.
        """
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        return ConnectSession.builder.remote(self.url).getOrCreate()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=self._stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _serve(port: int, master: str) -> None:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName("osqueue-connect-server")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", JAVA_OPTIONS)  # CPU: tests.support.spark_jvm
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.connect.grpc.binding.port", str(port))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    print(f"{READY}sc://127.0.0.1:{port}", flush=True)
    try:
        sys.stdin.read()  # until the parent closes our stdin or dies
    finally:
        session.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: a free one)")
    parser.add_argument("--master", default="local[2]", help="Spark master of the server")
    args = parser.parse_args(argv)
    _serve(args.port or free_port(), args.master)


if __name__ == "__main__":
    main()
