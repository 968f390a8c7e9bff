"""broker.model.inserts.insert_jobs keeps a job with options (a priority, a key,
a delay) as a Job until it is claimed: its payload there is a compact copy, not
the 4 KB buffer orjson.dumps made it in (the HTTP parser's, see
broker.wire.compact), and the bytes are the ones pushed."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import Job
from broker.model.ops import NewJob, Push
from tests.support.memory import traced_per
from tests.support.states import new_queue

NOW = 1_767_225_600_000
N = 2000

OPTIONS: dict[str, Any] = {
    "priority": lambda i: {"priority": 1},
    "key": lambda i: {"key": f"k{i}"},
    "delay": lambda i: {"delay_ms": 60_000},
}


@pytest.mark.parametrize("kind", sorted(OPTIONS))
def test_a_pending_job_with_options_keeps_a_compact_payload(kind: str) -> None:
    state = new_queue(NOW)

    def push() -> None:
        jobs = (NewJob(orjson.dumps({"n": i}), **OPTIONS[kind](i))  # (as parse_new_jobs makes them)
                for i in range(N))
        T.apply(state, Push(tuple(jobs)), NOW)
        codec.stamp(state, "w", NOW)
        codec.encode_parts(state)  # (its line cached, as a commit leaves it)

    per, _ = traced_per(N, push)
    jobs = [state.jobs.entries[seq] for seq in range(1, N + 1)]
    assert all(isinstance(job, Job) for job in jobs)
    assert [job.payload for job in jobs] == [  # type: ignore[union-attr]
        b'{"n":%d}' % i for i in range(N)]
    # (main: 4,900-5,200 B traced a job; ~860-1,200 B with the copy)
    assert per < 1_500 + (500 if kind == "key" else 0), per
