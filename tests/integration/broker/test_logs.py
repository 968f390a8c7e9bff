"""One log format (broker.logs): a broker process writes every log line, uvicorn's
own included, as one JSON object on stderr; a refused token is logged at
warning with the method, path and client address, and never the token."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
import urllib3

from tests.support.broker_process import READY, BrokerProcess

TOKEN = "logs-test-token-never-logged"


def test_every_line_is_json_and_refusals_are_logged_without_the_token(tmp_path: Path) -> None:
    wrong = "wrong-token-never-logged-either"
    with BrokerProcess(f"file://{tmp_path}", "--token-env", "OSQ_LOGS_TOKEN",
                       env={"OSQ_LOGS_TOKEN": TOKEN}) as proc:
        r = urllib3.request("POST", f"{proc.url}/v1/queues/q/push", body=b"{}",
                            headers={"authorization": f"Bearer {wrong}"}, retries=False)
        assert r.status == 401
        port = int(proc.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"NOT HTTP\x00\r\n\r\n")  # uvicorn logs this itself
            while sock.recv(65536):
                pass
    lines = [line for line in proc.lines if not READY.search(line)]
    records = [orjson.loads(line) for line in lines]  # every line is one JSON object
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
    refused = [r for r in records if r["logger"] == "osqueue.http"]
    assert [r["level"] for r in refused] == ["warning"]
    assert refused[0]["msg"].startswith("refused POST '/v1/queues/q/push' from 127.0.0.1:")
    assert any(r["logger"].startswith("uvicorn") for r in records), records
    assert TOKEN not in proc.output and wrong not in proc.output
