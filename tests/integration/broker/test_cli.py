"""``osqueue-broker`` as a real process: when it cannot start, one line on stderr says
which part failed (opening the store, or binding the address), exit status 2, with
no credential and no raw control character in it, and nothing written."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from osqueue_spark import QueueClient, start_broker
from tests.support.broker_process import BrokerProcess
from tests.support.store_files import store_files

SECRET = "S3cr3tV4lue"


def refused(store: str, *args: str) -> str:
    """The one line a broker that must not start prints (exit status 2)."""
    proc = BrokerProcess(store, *args).start(expect_ready=False)
    assert proc.wait(60) == 2, proc.output
    assert proc.output.count("\n") == 1 and "Traceback" not in proc.output, proc.output
    assert proc.output.startswith("osqueue-broker: ")
    return proc.output




@pytest.mark.parametrize("store", [
    f"s3://AKIAEXAMPLE:{SECRET}@bucket/x",  # boto3's "Invalid bucket name" quoted it
    f"file://ops:{SECRET}@localhost/srv/osq",
])
def test_a_store_url_with_credentials_is_refused_and_never_echoed(store: str) -> None:
    line = refused(store)
    assert "cannot open store" in line and "must not carry a user or password" in line
    assert SECRET not in line and "listen" not in line


def test_a_store_that_cannot_be_opened_is_not_called_a_listen_error(tmp_path: Path) -> None:
    """``file:///etc/passwd`` said "cannot listen on 127.0.0.1:0: [Errno 17] File exists"."""
    not_a_dir = tmp_path / "passwd"
    not_a_dir.write_bytes(b"root:x:0:0\n")
    line = refused(f"file://{not_a_dir}")
    assert line.startswith(f"osqueue-broker: cannot open store file://{not_a_dir}: ")
    assert "File exists" in line and "listen" not in line
    assert not_a_dir.read_bytes() == b"root:x:0:0\n"


def test_an_address_in_use_is_a_listen_error_and_the_store_is_untouched(tmp_path: Path) -> None:
    store = f"file://{tmp_path}"
    with start_broker(store) as broker:
        QueueClient(broker.url, "q").push({"n": 1})
    before = store_files(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = refused(store, "--listen", f"127.0.0.1:{port}")
    assert line == f"osqueue-broker: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert store_files(tmp_path) == before


@pytest.mark.parametrize("where", ["store", "token_env"])
def test_control_characters_in_its_messages_are_escaped(tmp_path: Path, where: str) -> None:
    """A store path or a variable name holding terminal escapes (set the window title,
    clear the screen) reached the terminal raw."""
    odd = "st\x1b]0;pwned\x07\x1b[2Jore"
    root = tmp_path / odd
    (root / "broken").mkdir(parents=True)
    (root / "broken" / "queue.json").write_bytes(b'{"format": "osqueue", "vers')
    line = refused(f"file://{root}") if where == "store" else \
        refused(f"file://{tmp_path}", "--token-env", odd)
    assert "\x1b" not in line and "\x07" not in line
    assert "st\\x1b]0;pwned\\x07\\x1b[2Jore" in line
    assert (root / "broken" / "queue.json").read_bytes() == b'{"format": "osqueue", "vers'


def test_the_ready_line_escapes_the_store_path(tmp_path: Path) -> None:
    root = tmp_path / "q\x1b[2J"
    with BrokerProcess(f"file://{root}") as proc:
        assert proc.url
    ready = next(line for line in proc.lines if "ready on" in line)
    assert "\x1b" not in ready and "q\\x1b[2J" in ready
