"""Rows to jobs and staged lines, and times back to rows (pyarrow, no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest

from broker.errors import InvalidRequest
from broker.model.checks import parse_staged
from osqueue_spark.client import job_staged_line
from osqueue_spark.datasource.rows import (
    arrow_staged_chunks,
    arrow_staged_lines,
    row_to_job,
    ts,
    ts_text,
)


class Row(dict[str, Any]):
    """What a pyspark Row offers here: ``asDict``."""

    def asDict(self, recursive: bool = False) -> dict[str, Any]:
        return dict(self)


def parsed(lines: list[bytes]) -> list[tuple[dict[str, Any], Any]]:
    """Staged lines as (options, payload), the way the broker reads them."""
    out = []
    for line in lines:
        head, _, payload = line.rstrip(b"\n").partition(b"\t")
        out.append((orjson.loads(head) if head else {}, orjson.loads(payload)))
    return out


def test_a_payload_column_holds_json_text_a_struct_or_a_map() -> None:
    assert row_to_job(Row(payload='{"a": [1, 2]}')) == {"payload": {"a": [1, 2]}}
    assert row_to_job(Row(payload={"a": 1}, priority=3)) == {"payload": {"a": 1}, "priority": 3}
    assert row_to_job({"payload": "7", "key": "k1", "delay_s": None}) == {
        "payload": 7, "key": "k1"}


def test_without_a_payload_column_the_other_columns_are_the_payload() -> None:
    job = row_to_job(Row(doc=1, path="s3://b/1.json", priority=2, max_attempts=5))
    assert job == {"payload": {"doc": 1, "path": "s3://b/1.json"}, "priority": 2,
                   "max_attempts": 5}


def test_payload_text_that_is_not_json_is_refused_clearly() -> None:
    with pytest.raises(InvalidRequest, match="column 'payload' must hold JSON text"):
        row_to_job(Row(payload="{not json"))


def test_arrow_string_payloads_pass_through_with_their_options() -> None:
    batch = pa.RecordBatch.from_pydict({
        "payload": ['{"n":1}', '{"n":\n 2}', "[1,2]"],
        "priority": [None, 5, None],
        "key": ["k0", None, None],
    })
    lines = list(arrow_staged_lines(iter([batch])))
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    assert parsed(lines) == [({"key": "k0"}, {"n": 1}), ({"priority": 5}, {"n": 2}),
                             ({}, [1, 2])]
    assert lines[0] == b'{"key":"k0"}\t{"n":1}\n'  # the text as given, not re-encoded
    # the same lines the client's own encoder makes for the same jobs
    assert lines[2] == job_staged_line([1, 2])
    assert len(parse_staged(b"".join(lines), check=True, max_payload_bytes=1 << 20)) == 3


@pytest.mark.parametrize(("payloads", "message"), [
    (['{"n":1}', None], "column 'payload' is null in row 1"),
    (["nope"], "column 'payload' must hold JSON text"),
])
def test_bad_arrow_payloads_name_the_row(payloads: list[str | None], message: str) -> None:
    batch = pa.RecordBatch.from_pydict({"payload": pa.array(payloads, pa.string())})
    with pytest.raises(InvalidRequest, match=message):
        list(arrow_staged_lines(iter([batch])))


def test_arrow_rows_without_a_string_payload_become_json_objects() -> None:
    batch = pa.RecordBatch.from_pydict({
        "doc": [1, 2],
        "tags": pa.array([[("a", 1)], None], pa.map_(pa.string(), pa.int64())),
        "price": pa.array([Decimal("1.50"), None], pa.decimal128(5, 2)),
        "delay_s": [None, 1.5],
    })
    lines = list(arrow_staged_lines(iter([batch])))
    assert parsed(lines) == [({}, {"doc": 1, "tags": {"a": 1}, "price": "1.50"}),
                             ({"delay_s": 1.5}, {"doc": 2, "tags": None, "price": None})]


BIG = "18446744073709551617"


def test_long_numbers_in_payload_text_stay_exact() -> None:
    """Payload text was read with orjson and, where re-encoded, written back as the
    nearest double (1.8446744073709552e+19)."""
    job = row_to_job(Row(payload=f'{{"n": {BIG}, "d": 0.10000000000000000555}}'))
    assert job_staged_line(job) == f'\t{{"n":{BIG},"d":0.10000000000000000555}}\n'.encode()
    batch = pa.RecordBatch.from_pydict({"payload": [f'{{"n":\n {BIG}}}', f"[{BIG}]"]})
    assert list(arrow_staged_lines(iter([batch]))) == [
        f'\t{{"n":{BIG}}}\n'.encode(), f"\t[{BIG}]\n".encode()]


def test_decimals_go_as_their_exact_text() -> None:
    digits = "123456789012345678901234567890"
    assert job_staged_line(row_to_job(Row(price=Decimal(digits)))) == \
        f'\t{{"price":"{digits}"}}\n'.encode()


@pytest.mark.parametrize(("columns", "named"), [
    ({"doc": [1], "score": [float("nan")]}, "payload.score"),
    ({"payload": pa.array([{"x": float("inf")}], pa.struct([("x", pa.float64())]))},
     "payload.x"),
    ({"payload": ['{"n":1}'], "delay_s": [float("nan")]}, "delay_s"),
    ({"payload": ['{"n":1}'], "delay_s": [float("inf")]}, "delay_s"),
    ({"doc": [1], "delay_s": [float("nan")]}, "delay_s"),
    ({"doc": [1], "priority": [2**40]}, "priority"),
])
def test_a_nan_or_infinity_in_a_row_is_refused_naming_its_column(
        columns: dict[str, Any], named: str) -> None:
    """NaN was written as null: a null payload field, a delay of "now"."""
    batch = pa.RecordBatch.from_pydict(columns)
    with pytest.raises(InvalidRequest, match=named.replace(".", r"\.")) as info:
        list(arrow_staged_lines(iter([batch])))
    assert isinstance(info.value, ValueError)


def test_times_come_back_as_utc_datetimes() -> None:
    assert ts(None) is None and ts_text(None) is None and ts_text("") is None
    when = datetime(2026, 11, 22, 3, 4, 5, 678_000, tzinfo=UTC)
    assert ts(round(when.timestamp() * 1000)) == when
    assert ts_text("2026-11-22T03:04:05.678Z") == when


TEXTS = [orjson.dumps({"doc": i, "path": f"s3://b/{i}-é.json"}).decode() for i in range(50)]


@pytest.mark.parametrize("batches", [
    [pa.RecordBatch.from_pydict({"payload": TEXTS})],
    [pa.RecordBatch.from_pydict({"payload": TEXTS}).slice(7, 30),  # an offset into buffers
     pa.RecordBatch.from_pydict({"payload": TEXTS[:3]})],
    [pa.RecordBatch.from_pydict({"payload": pa.array(TEXTS, pa.large_string())}).slice(1)],
    [pa.RecordBatch.from_pydict({"payload": ['{"a":\n1}', "2", "[3]"]})],  # re-encoded
    [pa.RecordBatch.from_pydict({"payload": TEXTS[:4], "priority": [1, None, 2, None]})],
    [pa.RecordBatch.from_pydict({"doc": [1, 2, 3]})],
], ids=["plain", "sliced", "large-string", "line-break", "options", "columns"])
def test_arrow_staged_chunks_are_the_staged_lines_in_bounded_pieces(
        batches: list[pa.RecordBatch]) -> None:
    lines = list(arrow_staged_lines(iter(batches)))
    for max_rows, max_bytes in [(5000, 1 << 20), (7, 1 << 20), (1000, 200), (3, 1)]:
        pieces = list(arrow_staged_chunks(iter(batches), max_rows, max_bytes))
        assert b"".join(data for data, _ in pieces) == b"".join(lines)
        assert sum(n for _, n in pieces) == len(lines)
        for data, n in pieces:
            assert data.count(b"\n") == n and 1 <= n <= max_rows
            assert len(data) <= max_bytes or n == 1


def test_arrow_staged_chunks_join_plain_text_without_parsing_it() -> None:
    """Text that is not JSON passes (the broker refuses its chunk, naming the
    line); a null still names its row here."""
    batch = pa.RecordBatch.from_pydict({"payload": ["1", "nope"]})
    assert list(arrow_staged_chunks(iter([batch]), 10, 1 << 20)) == [(b"\t1\n\tnope\n", 2)]
    with pytest.raises(InvalidRequest, match="column 'payload' is null in row 1"):
        list(arrow_staged_chunks(iter([pa.RecordBatch.from_pydict(
            {"payload": pa.array(["1", None], pa.string())})]), 10, 1 << 20))
