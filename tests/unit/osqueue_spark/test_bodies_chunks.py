"""Push requests split by job count and by bytes (osqueue_spark.bodies.line_chunks,
what QueueClient.push_many sends)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from osqueue_spark.bodies import body_line, job_body, line_chunks


def _bodies(sizes: list[int]) -> list[dict[str, Any]]:
    return [job_body("x" * n) for n in sizes]


def test_requests_hold_at_most_size_jobs_and_max_bytes() -> None:
    bodies = _bodies([100] * 10)
    line = len(body_line(bodies[0]))
    chunks = list(line_chunks(iter(bodies), 4, 3 * line))
    assert [len(c) for c in chunks] == [3, 3, 3, 1]
    assert all(sum(map(len, c)) <= 3 * line for c in chunks)
    assert [len(c) for c in line_chunks(iter(bodies), 4, 10**9)] == [4, 4, 2]
    assert b"".join(b"".join(c) for c in chunks) == b"".join(map(body_line, bodies))


def test_a_job_larger_than_max_bytes_goes_alone() -> None:
    chunks = list(line_chunks(iter(_bodies([10, 5000, 10])), 100, 1000))
    assert [len(c) for c in chunks] == [1, 1, 1]


def test_a_full_request_is_handed_out_before_the_next_job_is_taken() -> None:
    """A partition whose iterator dies after two rows has pushed both (batches of 1)."""
    def rows() -> Iterator[dict[str, Any]]:
        yield job_body(1)
        yield job_body(2)
        raise RuntimeError("the task died")

    it = line_chunks(rows(), 1, 10**6)
    assert [next(it), next(it)] == [[body_line(job_body(1))], [body_line(job_body(2))]]
    with pytest.raises(RuntimeError):
        next(it)
