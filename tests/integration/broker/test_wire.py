"""broker.wire: JSON numbers read and written exactly (orjson alone rounds an integer
beyond 64 bits or a long decimal to a double), and the same through a real broker
process: push, claim, listing, completion, archive and a restart keep every number
as it was sent; a number beyond a double's range is a 422 naming its field."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
import urllib3
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import wire
from broker.errors import RequestError
from broker.model.checks import parse_staged
from tests.support.broker_process import BrokerProcess, eventually

#: Numbers orjson changes, as sent: an integer past 64 bits either way, long decimals,
#: a double's smallest numbers.
INEXACT = [b"18446744073709551617", b"-9223372036854775809",
           b"340282366920938463463374607431768211457",
           b"0.1000000000000000055511151231257827", b"3.14159265358979323846264338327950288",
           b"1.0000000000000000001e5", b"1.234567890123456789e-320"]


@pytest.mark.parametrize("number", INEXACT)
def test_numbers_orjson_rounds_are_read_and_written_as_sent(number: bytes) -> None:
    doc = b'{"n":%s,"in":[%s],"s":"%s"}' % (number, number, number)
    assert orjson.dumps(orjson.loads(doc)) != doc  # what the fix is for
    value = wire.loads(doc)
    assert wire.dumps(value) == doc
    assert Decimal(str(value["n"])) == Decimal(number.decode())  # ints in full, the rest as text


def test_numbers_orjson_keeps_stay_plain_ints_and_floats(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Long digit runs that orjson reads exactly (a 64-bit id, a double's shortest
    spelling, digits in a string) take orjson's path and its types."""
    doc = (b'{"id":1234567890123456789,"max":18446744073709551615,"min":-9223372036854775808,'
           b'"x":13.436424411240122,"t":1e-300,"s":"1234567890123456789012e-3000",'
           b'"d":"2024-01-02T03:04:05.123456789","f":"image-001.png",'
           b'"text":"order 12345678901234567890123 of 1e-400"}')
    monkeypatch.setattr(wire, "_loads_slowly", None)  # orjson's path only
    value = wire.loads(doc)
    assert value == orjson.loads(doc)
    assert all(type(v) in (int, float, str) for v in value.values())


def test_a_number_beyond_a_double_is_read_and_refused_when_written() -> None:
    value = wire.loads(b'{"a":[1,1e400]}')  # orjson refuses the whole document
    big = value["a"][1]
    assert isinstance(big, wire.ExactNumber) and big == float("inf") and repr(big) == "1e400"
    with pytest.raises(wire.NonFinite, match="1e400"):
        wire.dumps(value)
    assert wire.non_finite(value) == "a[1]"


@pytest.mark.parametrize("doc", [
    b'[12345678901234567890123, NaN]', b'[12345678901234567890123, Infinity]',
    b'[12345678901234567890123, "\\ud800"]', b'[1e400, "\\udfff"]',
    b'[12345678901234567890123, "\xff"]', b'[12345678901234567890123,]', b"[1e400",
    b"\xef\xbb\xbf[12345678901234567890123]",
])
def test_the_slow_path_refuses_what_orjson_refuses(doc: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        wire.loads(doc)
    with pytest.raises(RequestError, match="not valid JSON"):
        wire.parse_json(doc)


@pytest.mark.parametrize("text", ['"a\ud800"', '[12345678901234567890123, "\udcff"]'])
def test_loads_of_text_with_a_lone_surrogate_raises_a_json_error(text: str) -> None:
    """As orjson.loads does: a str from the command line (undecodable bytes become
    lone surrogates) is refused as JSON by the CLI and the Spark rows, no
    UnicodeEncodeError escaping with a traceback."""
    with pytest.raises(orjson.JSONDecodeError):
        wire.loads(text)


def test_exact_numbers_pickle_and_compare_as_floats() -> None:
    import pickle

    x = wire.loads(b"0.1000000000000000055511151231257827")
    assert isinstance(x, wire.ExactNumber) and x == 0.1 and x + 1 == 1.1
    copy = pickle.loads(pickle.dumps(x))
    assert copy.text == x.text and wire.dumps([copy]) == b"[0.1000000000000000055511151231257827]"


def test_dumps_writes_big_python_ints_and_subclasses() -> None:
    class Key(str):
        pass

    value = {"k": [2**70, -(2**64), True, None, Key("v"), (1, 2)], "f": 1.5}
    assert wire.dumps(value) == (b'{"k":[1180591620717411303424,-18446744073709551616,true,null,'
                                 b'"v",[1,2]],"f":1.5}')


def test_a_staged_line_keeps_a_long_number_of_a_payload_it_re_encodes() -> None:
    line = wire.encode_staged_line(b'{"n":\n 18446744073709551617}', {"priority": 2})
    assert line == b'{"priority":2}\t{"n":18446744073709551617}\n'
    assert parse_staged(line, check=True, max_payload_bytes=100)[0].payload \
        == b'{"n":18446744073709551617}'


# Any JSON number as text: integers of any size, decimals of any length and exponent.
NUMBER_TEXT = st.builds(
    lambda sign, digits, frac, exp: f"{sign}{digits}{frac}{exp}",
    st.sampled_from(["", "-"]),
    st.one_of(st.just("0"), st.integers(1, 10**40).map(str)),
    st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=30).map(lambda d: f".{d}")),
    st.one_of(st.just(""), st.integers(-300, 330).map(lambda e: f"e{e}")))


@settings(max_examples=400, deadline=None)
@given(st.lists(NUMBER_TEXT, min_size=1, max_size=5))
def test_every_finite_number_comes_back_with_its_value(numbers: list[str]) -> None:
    doc = f'{{"a":[{",".join(numbers)}],"s":"x"}}'.encode()
    exact = [Decimal(n) for n in numbers]
    if any(abs(d) > Decimal("1.7976931348623157e308") for d in exact):
        with pytest.raises(wire.NonFinite):
            wire.dumps(wire.loads(doc))
        return
    back = json.loads(wire.dumps(wire.loads(doc)), parse_float=Decimal, parse_int=Decimal)
    assert back["a"] == exact


# -- through a real broker ---------------------------------------------------------

H = {"content-type": "application/json"}
BIG = b"18446744073709551617"
LONG = b"0.1000000000000000055511151231257827"


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


def call(url: str, body: bytes | None = None, method: str = "POST") -> urllib3.BaseHTTPResponse:
    return urllib3.request(method, url, body=body, headers=H, retries=False)


def files(root: Path) -> dict[str, bytes]:
    """The store's objects (hidden version and lock files left out), read through links."""
    return {os.path.relpath(os.path.join(d, f), root): Path(d, f).read_bytes()
            for d, _, names in os.walk(root) for f in names
            if not f.startswith(".") and "/." not in d}


def test_numbers_are_kept_exact_from_push_to_archive_and_after_a_restart(store: Path) -> None:
    payload = b'{"n":%s,"x":[%s,12345678901234567890123]}' % (BIG, LONG)
    result = b'{"r":%s}' % LONG
    with BrokerProcess(f"file://{store}") as broker:
        q = f"{broker.url}/v1/queues/exact"
        pushed = call(f"{q}/push", b'{"jobs":[{"payload":%s},{"payload":%s}]}' % (payload, BIG))
        assert pushed.status == 200, pushed.data
        claimed = call(f"{q}/claim", b'{"worker":"w","max_jobs":1}')
        assert b'"payload":%s,' % payload in claimed.data
        token = claimed.json()["jobs"][0]["token"]
        done = call(f"{q}/complete", b'{"items":[{"token":"%s","result":%s}]}'
                    % (token.encode(), result))
        assert done.status == 200 and done.json()["results"][0]["ok"], done.data
        archived = eventually(lambda: [k for k in files(store) if "/archive/" in k],
                              what="the archive object")
        assert b'"payload":%s' % payload in files(store)[archived[0]]
        assert b'"result":%s' % result in files(store)[archived[0]]
    with BrokerProcess(f"file://{store}") as broker:  # the object read back, not held
        listed = call(f"{broker.url}/v1/queues/exact/jobs?status=pending", method="GET")
        # (the payload's digits whole: followed by the next field or the row's end)
        assert any(b'"payload":%s%s' % (BIG, end) in listed.data for end in (b",", b"}")), \
            listed.data


@pytest.mark.parametrize(("job", "field"), [
    (b'{"payload":1e400}', "jobs[0].payload"),
    (b'{"payload":{"a":[1,-1e999]}}', "jobs[0].payload"),
    (b'{"payload":1,"priority":1e400}', "jobs[0].priority"),
    (b'{"payload":1,"priority":%s}' % BIG, "jobs[0].priority"),
    (b'{"payload":1,"delay_s":1e400}', "jobs[0].delay_s"),
    (b'{"payload":1,"max_attempts":%s}' % BIG, "jobs[0].max_attempts"),
])
def test_a_number_out_of_range_is_a_422_naming_its_field(store: Path, job: bytes,
                                                         field: str) -> None:
    """1e400 was a 400 "not valid JSON" (orjson reads it as infinity and refuses);
    nothing is written."""
    with BrokerProcess(f"file://{store}", "--lease-s", "3600") as broker:
        q = f"{broker.url}/v1/queues/range"
        assert call(f"{q}/push", b'{"jobs":[{"payload":"seed"}]}').status == 200
        token = call(f"{q}/claim", b'{"worker":"w"}').json()["jobs"][0]["token"]
        before = files(store)
        r = call(f"{q}/push", b'{"jobs":[%s]}' % job)
        assert r.status == 422 and field in r.json()["error"], r.data
        bad = call(f"{q}/complete", b'{"items":[{"token":"%s","result":[1e400]}]}'
                   % token.encode())
        assert bad.status == 422 and "items[0].result" in bad.json()["error"], bad.data
        assert files(store) == before
        assert call(f"{q}/stats", method="GET").json()["total"] == 1
