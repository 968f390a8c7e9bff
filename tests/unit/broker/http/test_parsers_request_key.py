"""parsers.parse_request_key: an Idempotency-Key is 1..MAX_REQUEST_KEY_CHARS bytes of
printable ASCII without space, byte by byte; calls.client_of (cached) reads the same
key the same way every time."""

from __future__ import annotations

import pytest

from broker.errors import InvalidRequest
from broker.http.parsers import parse_request_key
from broker.limits import MAX_REQUEST_KEY_CHARS
from broker.model import calls


def test_parse_request_key_takes_each_printable_byte_and_refuses_every_other() -> None:
    for byte in range(256):
        raw = b"r-abc-" + bytes([byte]) + b"1"
        if 33 <= byte < 127:
            assert parse_request_key(raw) == raw.decode()
        else:
            with pytest.raises(InvalidRequest, match="printable ASCII"):
                parse_request_key(raw)


def test_parse_request_key_bounds_its_length() -> None:
    assert parse_request_key(None) is None
    assert parse_request_key(b"k" * MAX_REQUEST_KEY_CHARS) == "k" * MAX_REQUEST_KEY_CHARS
    for raw in (b"", b"k" * (MAX_REQUEST_KEY_CHARS + 1)):
        with pytest.raises(InvalidRequest):
            parse_request_key(raw)


def test_client_of_answers_the_same_for_a_key_read_again() -> None:
    keys = [f"r-{n:012x}-{n}" for n in range(3000)] + ["r-x-1.2", "other", "r-x-1.y"]
    plain = [calls.client_of.__wrapped__(k) for k in keys]  # the parse itself, uncached
    assert plain[:2] == [("r-000000000000", 0), ("r-000000000001", 1)]
    assert plain[-3:] == [("r-x", 1), None, None]
    assert [calls.client_of(k) for k in keys] == plain
    # again, and with equal strings that are other objects (the cache is bounded)
    assert [calls.client_of("".join(k)) for k in reversed(keys)] == plain[::-1]
