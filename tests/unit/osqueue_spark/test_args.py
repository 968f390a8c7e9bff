"""osqueue_spark.args through QueueClient and the ``osqueue`` CLI: options that are not
finite or lie outside the broker's limits, and payloads or results holding a NaN or
an infinity, are refused in one line naming the field before anything is sent
(they were sent as ``null``: "now", 30 s, a null payload); numbers go out and come
back exact; a bad queue name is refused by the constructor."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from broker.errors import InvalidRequest
from osqueue_spark import QueueClient
from osqueue_spark.args import InvalidArgument
from osqueue_spark.cli import main
from osqueue_spark.transport import MockTransport, Request, Response

NAN, INF = float("nan"), float("inf")


class Recorder:
    """A transport that records each request and answers ``answer``."""

    def __init__(self, answer: dict[str, Any] | bytes | None = None) -> None:
        self.requests: list[Request] = []
        self.answer = answer

    def __call__(self, request: Request) -> Response:
        self.requests.append(request)
        body = self.answer if isinstance(self.answer, bytes) else orjson.dumps(self.answer)
        return Response(200, {}, body)


def client_with(recorder: Recorder) -> QueueClient:
    return QueueClient("http://broker:1", "q", retry_s=0, transport=MockTransport(recorder))


REFUSED: list[tuple[str, Callable[[QueueClient], object], str]] = [
    ("push nan", lambda c: c.push(NAN), "payload"),
    ("push inf inside", lambda c: c.push({"a": [1, INF]}), "payload.a[1]"),
    ("delay inf", lambda c: c.push(1, delay_s=INF), "delay_s"),
    ("delay nan", lambda c: c.push(1, delay_s=NAN), "delay_s"),
    ("delay negative", lambda c: c.push(1, delay_s=-1), "delay_s"),
    ("priority 2**70", lambda c: c.push(1, priority=2**70), "priority"),
    ("priority float", lambda c: c.push(1, priority=1.5), "priority"),
    ("priority bool", lambda c: c.push(1, priority=True), "priority"),
    ("max_attempts 0", lambda c: c.push(1, max_attempts=0), "max_attempts"),
    ("key empty", lambda c: c.push(1, key=""), "key"),
    ("push_many option", lambda c: c.push_many([{"payload": 1, "delay_s": NAN}]), "delay_s"),
    ("batch size 0", lambda c: c.push_many([1], batch_size=0), "batch_size"),
    ("lease nan", lambda c: c.claim("w", lease_s=NAN), "lease_s"),
    ("lease inf", lambda c: c.claim("w", lease_s=INF), "lease_s"),
    ("wait nan", lambda c: c.claim("w", wait_s=NAN), "wait_s"),
    ("max_jobs 2**70", lambda c: c.claim("w", max_jobs=2**70), "max_jobs"),
    ("worker empty", lambda c: c.claim(""), "worker"),
    ("heartbeat lease", lambda c: c.heartbeat(["t"], lease_s=NAN), "lease_s"),
    ("complete nan", lambda c: c.complete("t", {"score": NAN}), "items[0].result.score"),
    ("fail retry inf", lambda c: c.fail("t", "e", retry_in_s=INF), "items[0].retry_in_s"),
    ("jobs limit", lambda c: c.jobs(limit=0), "limit"),
]


@pytest.mark.parametrize(("call", "field"), [(c, f) for _, c, f in REFUSED],
                         ids=[name for name, _, _ in REFUSED])
def test_bad_arguments_are_refused_before_sending(call: Callable[[QueueClient], object],
                                                   field: str) -> None:
    recorder = Recorder()
    with pytest.raises(InvalidArgument) as info:
        call(client_with(recorder))
    message = str(info.value)
    assert field in message and "\n" not in message and len(message) < 200
    assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidRequest)
    assert recorder.requests == []


def test_numbers_are_sent_exactly() -> None:
    recorder = Recorder({"ids": ["j0000000001"]})
    client = client_with(recorder)
    client.push({"big": 2**70, "neg": -(2**64)}, priority=-5, delay_s=0.5)
    body = recorder.requests[0].body
    assert body == b'{"priority":-5,"delay_s":0.5}\t{"big":1180591620717411303424,' \
                   b'"neg":-18446744073709551616}\n'
    recorder.answer = {"results": [{"token": "t", "ok": True}]}
    client.complete("t", [2**80, math.pi])
    assert recorder.requests[1].body == \
        b'{"items":[{"token":"t","result":[1208925819614629174706176,3.141592653589793]}]}'


def test_claimed_payloads_come_back_exact_and_can_be_sent_again() -> None:
    recorder = Recorder(b'{"jobs":[{"id":"j1","payload":{"n":18446744073709551617,'
                        b'"d":0.1000000000000000055511151231257827},"token":"t","attempt":1,'
                        b'"lease_expires_at":"2026-01-01T00:00:00.000Z"}]}')
    client = client_with(recorder)
    job = client.claim("w")[0]
    assert job.payload["n"] == 18446744073709551617 and job.payload["d"] == 0.1
    recorder.answer = {"results": [{"token": "t", "ok": True}]}
    client.complete(job.token, job.payload)
    assert b'"result":{"n":18446744073709551617,"d":0.1000000000000000055511151231257827}' \
        in (recorder.requests[1].body or b"")


def test_complete_and_fail_bodies_carry_no_nulls_for_defaults() -> None:
    recorder = Recorder({"results": [{"token": "t", "ok": True}, {"token": "u", "ok": True}]})
    client = client_with(recorder)
    client.complete_many([("t", None), ("u", 1)])
    client.fail_many([("t", "boom", None), ("u", "", 2.5)])
    assert recorder.requests[0].body == b'{"items":[{"token":"t"},{"token":"u","result":1}]}'
    assert recorder.requests[1].body == (b'{"items":[{"token":"t","error":"boom"},'
                                         b'{"token":"u","error":"","retry_in_s":2.5}]}')


@pytest.mark.parametrize("name", ["docs\n", "docs\r", " docs"])
def test_a_queue_name_with_a_line_break_or_space_is_refused(name: str) -> None:
    with pytest.raises(InvalidRequest, match="invalid queue name"):
        QueueClient("http://broker:1", name)
    with pytest.raises(InvalidRequest, match="invalid queue name"):
        QueueClient("http://broker:1", "q").with_queue(name)


@pytest.mark.parametrize(("argv", "field"), [
    (["push", "--priority", str(2**70), "1"], "priority"),
    (["push", "--delay-s", "nan", "1"], "delay_s"),
    (["push", "--delay-s", "inf", "1"], "delay_s"),
    (["push", '{"a": NaN}'], "NaN"),
])
def test_the_cli_says_what_is_wrong_in_one_line(argv: list[str], field: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``--priority 2**70`` printed a TypeError traceback; NaN went out as null. A bad
    argument exits 2, as the help says (an argument refused before sending exited 1)."""
    code = main(["--broker", "http://127.0.0.1:1", "--queue", "q", *argv])
    err = capsys.readouterr().err
    assert code == 2 and field in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
