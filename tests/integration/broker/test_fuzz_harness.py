"""The fuzz suite's oracle (tests/support/fuzz_harness.py, ``Harness.check``) fails what
it exists to catch: a refused request that changed the store (or a canary outside
it), and a request that must be refused but was served. The broker under judgement
here is a small HTTP server on loopback that is broken on purpose: it answers every
request with a set status and body, and may write into the store while it does."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker.http.routes import ROUTES
from tests.support.fuzz_harness import Harness
from tests.support.fuzz_requests import FuzzRequest

TOKEN = "t0k3n-for-the-oracle-test-0123456789"
JSON = (("Content-Type", "application/json"),)
PUSH = next(r for r in ROUTES if r.method == "POST" and r.path.endswith("/push"))


@dataclass
class Behaviour:
    """What the broken broker does with each request: answer ``status`` with ``body``,
    after calling ``meanwhile`` (a write into the store, say)."""

    status: int = 400
    body: dict[str, Any] = field(default_factory=lambda: {"error": "refused",
                                                          "code": "invalid_request"})
    meanwhile: Callable[[], None] = lambda: None
    seen: list[str] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        how: Behaviour = self.server.behaviour
        how.seen.append(f"{self.command} {self.path}")
        how.meanwhile()
        data = orjson.dumps(how.body)
        self.send_response(how.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _answer


@pytest.fixture()
def broken(tmp_path: Path) -> Iterator[tuple[Harness, Behaviour, Path, Path]]:
    """(the harness, the broken broker's behaviour, the store root, a canary file outside
    the store)."""
    root, outside = tmp_path / "store", tmp_path / "outside"
    (root / "fz-a").mkdir(parents=True)
    (root / "fz-a" / "queue.json").write_bytes(b'{"seq": 1}')
    (root / "fz-a" / "archive").mkdir()
    outside.mkdir()
    canary = outside / "canary.json"
    canary.write_bytes(b'{"canary": 1}')
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.behaviour = Behaviour()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    harness = Harness(f"http://127.0.0.1:{server.server_address[1]}", root, [TOKEN],
                      [outside], private=["fz-a"])
    try:
        yield harness, server.behaviour, root, canary  # type: ignore[attr-defined]
    finally:
        harness.pool.close()
        server.shutdown()
        server.server_close()
        thread.join(10)


def bad_push(*headers: tuple[str, str], queue: str = "fz-a") -> FuzzRequest:
    """A push the broker must refuse: ``jobs`` is not a list."""
    return FuzzRequest("POST", f"/v1/queues/{queue}/push", "valid", (*JSON, *headers),
                       b'{"jobs": "nope"}', PUSH, queue)


def test_a_refusal_that_changes_nothing_passes(
        broken: tuple[Harness, Behaviour, Path, Path]) -> None:
    harness, how, _, _ = broken
    assert harness.check(bad_push()) == []
    assert how.seen == ["POST /v1/queues/fz-a/push"]


def test_a_refused_request_that_changed_the_store_fails(
        broken: tuple[Harness, Behaviour, Path, Path]) -> None:
    harness, how, root, _ = broken
    head = root / "fz-a" / "queue.json"
    how.meanwhile = lambda: head.write_bytes(b'{"seq": 2}')
    [problem] = harness.check(bad_push())
    assert problem.startswith(f"state: the store changed: ~{head} [POST -> 400"), problem


def test_a_refused_request_that_added_an_object_fails(
        broken: tuple[Harness, Behaviour, Path, Path]) -> None:
    harness, how, root, _ = broken
    added = root / "fz-a" / "archive" / "000000000002-c-x.jsonl"
    how.meanwhile = lambda: added.write_bytes(b'{"id": "j1"}\n')
    [problem] = harness.check(bad_push())
    assert problem.startswith(f"state: the store changed: +{added}"), problem


def test_a_refused_request_that_changed_a_canary_outside_the_store_fails(
        broken: tuple[Harness, Behaviour, Path, Path]) -> None:
    harness, how, _, canary = broken
    how.meanwhile = lambda: canary.write_bytes(b"overwritten")
    [problem] = harness.check(bad_push())
    assert problem.startswith(f"state: the store changed: ~{canary}"), problem


def test_only_a_keyed_push_refused_as_full_may_write_its_queue_object(
        broken: tuple[Harness, Behaviour, Path, Path]) -> None:
    harness, how, root, _ = broken
    head = root / "fz-a" / "queue.json"
    how.status, how.body = 503, {"error": "queue full", "code": "queue_full"}
    how.meanwhile = lambda: head.write_bytes(head.read_bytes() + b" ")
    keyed = ("Idempotency-Key", "r-fz-1")
    assert harness.check(bad_push(keyed)) == []  # remembered, by design
    [problem] = harness.check(bad_push())  # without a key there is nothing to remember
    assert problem.startswith(f"state: the store changed: ~{head}"), problem
    other = root / "fz-a" / "archive" / "x.jsonl"
    how.meanwhile = lambda: (head.write_bytes(head.read_bytes() + b" "),
                             other.write_bytes(b"x"))[0]
    [problem] = harness.check(bad_push(keyed))
    assert f"+{other}" in problem and f"~{head}" in problem, problem


def test_a_request_that_must_be_refused_but_was_served_fails(
        broken: tuple[Harness, Behaviour, Path, Path]) -> None:
    harness, how, _, _ = broken
    how.status, how.body = 200, {"ids": []}
    # (a queue the harness does not seed again after a success)
    problems = harness.check(bad_push(queue="fz.new_1"))
    assert any(p.startswith("refused: must be refused (model: ") for p in problems), problems
