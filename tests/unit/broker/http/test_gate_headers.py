"""Gate.check given the request's headers as a mapping (the hot path passes the dict
it builds anyway): the same verdict as from the scope's header list alone, for every
mix of Host, browser headers and repeated names, on brokers with and without a
token; and App.check_type's lookup of the type as clients send it."""

from __future__ import annotations

import itertools

import pytest

from broker.errors import Forbidden, UnsupportedMediaType
from broker.http.app import App
from broker.http.gate import Gate
from broker.http.route import JSON, STAGED, Route
from broker.wire import STAGED_CONTENT_TYPE

URL = "http://10.0.0.5:8765"
HOSTS = [None, b"127.0.0.1:8765", b"10.0.0.5:1", b"evil.example", b"localhost"]
BROWSER = [[], [(b"sec-fetch-site", b"cross-site")], [(b"sec-fetch-site", b"same-origin")],
           [(b"origin", b"http://evil.example")], [(b"origin", b"http://10.0.0.5:8765")],
           [(b"referer", b"http://evil.example/page")], [(b"origin", b"null")]]


def _verdict(gate: Gate, scope: dict[str, object], headers: dict[bytes, bytes] | None) -> str:
    try:
        gate.check(scope, headers)
    except Forbidden:
        return "forbidden"
    return "answered"


@pytest.mark.parametrize("any_host", [False, True])
def test_gate_check_with_a_header_mapping_agrees_with_the_header_list(any_host: bool) -> None:
    by_list, by_map = Gate(URL, any_host=any_host), Gate(URL, any_host=any_host)
    seen = set()
    for _ in range(2):  # the second round: hosts answered before (the mapping's short cut)
        for host, extra, dup in itertools.product(HOSTS, BROWSER, [None, *HOSTS[1:]]):
            headers = ([] if host is None else [(b"host", host)]) + extra + [
                (b"content-type", b"application/json")]
            if dup is not None:  # a repeated Host: the last one counts, in both
                headers.append((b"host", dup))
            scope = {"method": "POST", "path": "/v1/queues/q/push", "client": ("10.1.1.1", 5),
                     "headers": headers}
            want = _verdict(by_list, scope, None)
            assert _verdict(by_map, scope, dict(headers)) == want, headers
            seen.add(want)
    assert seen == {"forbidden", "answered"}


def test_check_type_takes_exact_and_spelled_types_and_refuses_others() -> None:
    app = App.__new__(App)  # check_type reads the route and the headers only
    push = Route("POST", "/v1/queues/{queue}/push", handler=None,  # type: ignore[arg-type]
                 summary="", body=JSON)
    stage = Route("POST", "/v1/queues/{queue}/stage", handler=None,  # type: ignore[arg-type]
                  summary="", body=STAGED)
    assert app.check_type(push, {b"content-type": b"application/json"}) == JSON
    assert app.check_type(push, {b"content-type": b"Application/JSON; charset=utf-8"}) == JSON
    assert app.check_type(stage, {b"content-type": STAGED_CONTENT_TYPE.encode()}) == STAGED
    for headers in ({}, {b"content-type": b"text/plain"}, {b"content-type": b""},
                    {b"content-type": STAGED_CONTENT_TYPE.encode()}):
        with pytest.raises(UnsupportedMediaType):
            app.check_type(push, headers)
