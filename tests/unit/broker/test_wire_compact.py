"""broker.wire.compact: the same bytes in an object of their own size, where
orjson.dumps hands back its whole write buffer (~4 KB for a short value)."""

from __future__ import annotations

import orjson

from broker.wire import compact
from tests.support.memory import traced_per


def test_compact_keeps_the_bytes_in_an_object_of_their_size() -> None:
    values = [orjson.dumps({"n": i, "tenant": f"tenant-{i}"}) for i in range(1000)]
    per, kept = traced_per(1000, lambda: [compact(v) for v in values])
    assert kept == values
    assert all(type(k) is bytes for k in kept)
    assert per < 200  # (an orjson.dumps result of this size traces ~4,100 B)


def test_compact_of_empty_and_long_bytes_is_equal() -> None:
    long = orjson.dumps("x" * 70_000)
    assert compact(b"") == b""
    assert compact(long) == long
