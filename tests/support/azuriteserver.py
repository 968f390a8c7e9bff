"""Azurite's Blob service on 127.0.0.1, shared by the tests and the chaos runner.

Azurite (Microsoft's Azure Storage emulator, from the npm registry) is installed
by ``make test`` into the checkout's ``.tools/`` (``npm install --prefix .tools
azurite@VERSION``); :func:`azurite_command` finds it there (or ``AZURITE_BLOB``,
a path to ``azurite-blob``). The server runs as a child process with a fresh
account whose key is random per server, so a test that looks for the key in
reprs and errors looks for a real secret::

    server = AzuriteServer().start()   # waits until it answers HTTP
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = server.connection_string
    server.create_container("q")
    ...
    server.stop()

As a script (prints ``azuriteserver ready on http://127.0.0.1:PORT/ACCOUNT`` on
stderr; the connection string goes to ``--connection-string-file`` only, mode
0600, never to the terminal)::

    python -m tests.support.azuriteserver [--port 0] [--container NAME ...]

Azurite checks a blob's conditions and replaces it in one synchronous step of
its single-threaded event loop (``LokiBlobMetadataStore.createBlob``), so its
compare-and-set is honest under concurrent writers. Its ETags are the time in
milliseconds times a random number in [70000, 100000]: unique per write in
practice, like Azure's.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.serving import StopSignals, free_port

#: The Azurite release the Makefile installs (npm, pinned).
AZURITE_VERSION = "3.37.0"
ROOT = Path(__file__).resolve().parents[2]
LOCAL_BIN = ROOT / ".tools" / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "osqueuetest"


class AzuriteMissing(RuntimeError):
    """node or Azurite is not installed."""


def azurite_command() -> list[str]:
    """The ``azurite-blob`` command: ``AZURITE_BLOB``, else the checkout's ``.tools/``.

    Raises :class:`AzuriteMissing` (naming ``make test``, which installs it) if
    neither exists or node is not on PATH.
    """
    configured = os.environ.get("AZURITE_BLOB")
    path = Path(configured) if configured else LOCAL_BIN
    if not path.exists():
        raise AzuriteMissing(
            f"Azurite (the Azure Storage emulator) is not installed at {path}: `make test` "
            f"installs it (npm install --prefix .tools azurite@{AZURITE_VERSION}; needs node "
            "and npm), or set AZURITE_BLOB to an azurite-blob executable")
    if shutil.which("node") is None:
        raise AzuriteMissing(
            "node is not on PATH: Azurite needs Node.js (e.g. apt-get install nodejs npm), "
            "then `make test` installs Azurite")
    return [str(path)]


class AzuriteServer:
    """``azurite-blob`` on ``host``:``port`` (0: a free one) with a temporary workspace.

    ``start`` waits (up to ``start_timeout_s`` seconds, polling with HTTP requests)
    until the server answers and raises ``RuntimeError`` with its output if it
    exits or stays silent; ``stop`` terminates it (kill after 10 s) and removes
    the workspace.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, account: str = ACCOUNT,
                 start_timeout_s: float = 60.0) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.account = account
        self.key = base64.b64encode(os.urandom(64)).decode()
        self.endpoint = f"http://{host}:{self.port}/{account}"
        self._start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._workspace: str | None = None

    @property
    def connection_string(self) -> str:
        """What ``AZURE_STORAGE_CONNECTION_STRING`` should hold (it holds the key)."""
        return (f"DefaultEndpointsProtocol=http;AccountName={self.account};"
                f"AccountKey={self.key};BlobEndpoint={self.endpoint};")

    def argv(self, workspace: str) -> list[str]:
        return [*azurite_command(), "--blobHost", self.host, "--blobPort", str(self.port),
                "--location", workspace, "--silent", "--skipApiVersionCheck", "--loose",
                "--disableTelemetry"]

    def env(self) -> dict[str, str]:
        """The server's environment: its one account (the key stays out of argv)."""
        return dict(os.environ, AZURITE_ACCOUNTS=f"{self.account}:{self.key}")

    def start(self) -> AzuriteServer:
        self._workspace = tempfile.mkdtemp(prefix="osq-azurite-")
        log = open(Path(self._workspace) / "azurite.out", "wb")  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(self.argv(self._workspace), stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT,
                                          env=self.env())
        except BaseException:
            log.close()
            self._cleanup()
            raise
        log.close()
        try:
            wait_until_serving(self.host, self.port, self._start_timeout_s, self._proc)
        except RuntimeError as exc:
            out = self._output_tail()
            self.stop()
            raise RuntimeError(f"{exc}\n{out}") from None
        return self

    def _output_tail(self) -> str:
        if self._workspace is None:
            return ""
        try:
            text = (Path(self._workspace) / "azurite.out").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-20:])

    def create_container(self, name: str) -> None:
        """Create container ``name`` (an existing one is fine)."""
        create_container(self.connection_string, name)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._cleanup()

    def _cleanup(self) -> None:
        workspace, self._workspace = self._workspace, None
        if workspace is not None:
            shutil.rmtree(workspace, ignore_errors=True)

    def __enter__(self) -> AzuriteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until_serving(host: str, port: int, timeout_s: float,
                       proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``http://host:port/`` until any HTTP answer comes back.

    Raises ``RuntimeError`` if ``proc`` exits first or ``timeout_s`` seconds pass.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"azurite-blob exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/", timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answered (400: no account in the path)
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"azurite-blob did not answer on {host}:{port} in {timeout_s}s")
        time.sleep(delay)  # polling a port that is not open yet: no event to wait on
        delay = min(delay * 2, 0.5)


def create_container(connection_string: str, name: str) -> None:
    """Create container ``name`` with the account of ``connection_string``."""
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    with BlobServiceClient.from_connection_string(connection_string) as client:
        try:
            client.create_container(name)
        except ResourceExistsError:
            pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.azuriteserver",
                                description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="TCP port (0: a free one)")
    p.add_argument("--container", action="append", default=[],
                   help="create this container first")
    p.add_argument("--connection-string-file",
                   help="write the connection string (it holds the key) here, mode 0600")
    args = p.parse_args(argv)
    server = AzuriteServer(args.host, args.port)
    stop = StopSignals()
    server.start()
    try:
        for name in args.container:
            server.create_container(name)
        if args.connection_string_file:
            fd = os.open(args.connection_string_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                         0o600)
            with os.fdopen(fd, "w") as f:
                f.write(server.connection_string)
        print(f"azuriteserver ready on {server.endpoint}", file=sys.stderr, flush=True)
        stop.wait()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
