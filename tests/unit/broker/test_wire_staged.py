"""broker.wire's staged-line format, the one home of its definition: every
writer (broker.wire.encode_staged_line, the client's job_staged_line, the
Spark write's Arrow rows and Arrow-joined chunks) makes the same bytes for the
same jobs, and the broker's reader (broker.model.checks.parse_staged_chunk)
gives those jobs back; a stage body splits where it was joined."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import wire
from broker.http.parsers import parse_stage
from broker.model.checks import parse_staged_chunk
from broker.model.ops import NewJob
from osqueue_spark.bodies import job_staged_line
from osqueue_spark.datasource.rows import arrow_staged_chunks, arrow_staged_lines

#: Payload texts as a caller may spell them: white space (a raw tab, a line
#: break between tokens), escapes, a number orjson would round.
TEXTS = st.sampled_from(['{"n":1}', '{"a":\t[1, "x\\ty"]}', '{"n":\n 2}', "[1,2]", '"t"',
                         '{"big":18446744073709551617}', '"\\u00e9\\n"',
                         "0.1000000000000000055511"])
#: A job's options, in the order Spark's option columns come (an Arrow batch
#: writes them in column order; a float column holds floats).
NAMES = ("priority", "delay_s", "max_attempts", "key")
OPTIONS = st.fixed_dictionaries({}, optional={
    "priority": st.integers(-5, 5), "delay_s": st.sampled_from([0.5, 1.5]),
    "max_attempts": st.integers(1, 9), "key": st.sampled_from(["k", "k\t2"])}).map(
        lambda options: {name: options[name] for name in NAMES if name in options})


def arrow_batch(jobs: list[tuple[str, dict[str, Any]]]) -> pa.RecordBatch:
    columns: dict[str, list[Any]] = {"payload": [text for text, _ in jobs]}
    for name in NAMES:
        if any(name in options for _, options in jobs):
            columns[name] = [options.get(name) for _, options in jobs]
    return pa.RecordBatch.from_pydict(columns)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(TEXTS, OPTIONS), min_size=1, max_size=6))
def test_every_writer_makes_the_same_lines_and_the_broker_reads_them_back(
        jobs: list[tuple[str, dict[str, Any]]]) -> None:
    encoded = [wire.encode_staged_line(text.encode(), options or None) for text, options in jobs]
    client = [job_staged_line({"payload": wire.loads(text), **options})
              for text, options in jobs]
    arrow = list(arrow_staged_lines(iter([arrow_batch(jobs)])))
    assert arrow == encoded
    for ours, theirs in zip(client, encoded, strict=True):
        # the client writes the payload from its value: the same value, and
        # byte for byte when the text was already compact
        assert orjson.loads(ours.partition(b"\t")[2]) == orjson.loads(theirs.partition(b"\t")[2])
        assert ours.partition(b"\t")[0] == theirs.partition(b"\t")[0]
    data = b"".join(encoded)
    assert all(line.count(wire.STAGED_END) == 1 and line.endswith(wire.STAGED_END)
               for line in encoded)
    chunk = parse_staged_chunk(data, check=True, max_payload_bytes=1 << 20)
    for (text, options), job in zip(jobs, chunk.jobs, strict=True):
        payload = job if isinstance(job, bytes) else job.payload
        assert wire.loads(payload) == wire.loads(text)
        assert isinstance(job, bytes) == (not options)
        if isinstance(job, NewJob):
            assert (job.priority, job.key) == (options.get("priority", 0), options.get("key"))
    if not any(options for _, options in jobs):
        pieces = list(arrow_staged_chunks(iter([arrow_batch(jobs)]), 1000, 1 << 20))
        assert b"".join(piece for piece, _ in pieces) == data
        assert wire.bare_staged_payloads(data) == chunk.jobs


def test_a_stage_body_splits_where_it_was_joined() -> None:
    lines = wire.encode_staged_line(b"1") + wire.encode_staged_line(b"2", {"key": "k"})
    body = wire.stage_body("w-1", lines)
    assert body.startswith(b'{"write_id":"w-1"}\n')
    assert wire.split_stage_body(body) == (b'{"write_id":"w-1"}', lines)
    assert parse_stage(body) == ("w-1", lines)
