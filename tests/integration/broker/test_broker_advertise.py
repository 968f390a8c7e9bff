"""``osqueue-broker`` beyond loopback: a token or an explicit opt-out, and the
advertised URL is what it writes into the queue objects it owns."""

from __future__ import annotations

import secrets
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from broker import paths
from broker.http.server import is_loopback, primary_address
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark.client import QueueClient
from tests.support.broker_process import BrokerProcess


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port: int = s.getsockname()[1]
    return port


def _status(url: str, token: str | None = None) -> int:
    req = urllib.request.Request(f"{url}/v1/queues")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_beyond_loopback_without_a_token_it_refuses_to_start(tmp_path: Path) -> None:
    proc = BrokerProcess(f"file://{tmp_path}", "--listen", "0.0.0.0:0")
    proc.start(expect_ready=False)
    assert proc.wait() == 2
    assert "needs a bearer token" in proc.output and "--insecure-no-token" in proc.output
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_it_advertises_the_given_url_and_wants_the_token(tmp_path: Path) -> None:
    addr = primary_address()
    if is_loopback(addr):
        pytest.skip("this machine has no non-loopback address to listen on")
    port = _free_port()
    url = f"http://{addr}:{port}"
    token = secrets.token_urlsafe(32)
    with BrokerProcess(f"file://{tmp_path}", "--listen", f"0.0.0.0:{port}",
                       "--advertise-url", url, "--log-level", "info",
                       env={"OSQUEUE_TOKEN": token}) as proc:
        assert proc.url == url
        assert _status(url) == 401 and _status(url, token) == 200
        assert QueueClient(url, "q", token=token).push("hello")
        state = decode_state(FileStore(tmp_path).read(paths.state_key("q")).data)
        assert state.broker is not None and state.broker.url == url
    assert token not in proc.output
