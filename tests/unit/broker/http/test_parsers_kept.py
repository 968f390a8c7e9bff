"""What broker.http.parsers hands the model, applied: a pending job with a
priority or a key (kept as a Job), and a completion's result (kept until the
archive), each stays compact in the state (not the 4 KB buffer orjson.dumps
made it in: broker.wire.compact), its bytes as sent."""

from __future__ import annotations

import pytest

from broker.http.parsers import parse_complete, parse_new_jobs
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.ops import Claim, Complete, NewJob, Push, push_of
from tests.support.memory import traced_per
from tests.support.states import new_queue

NOW = 1_767_225_600_000
N = 2000
OPTION = {"plain": lambda i: {}, "priority": lambda i: {"priority": 1},
          "key": lambda i: {"key": f"k{i}"}}
#: bytes traced a pending job on main: plain 796, priority 4,941, key 5,254
BOUND = {"plain": 1_500, "priority": 1_500, "key": 2_000}


@pytest.mark.parametrize("kind", sorted(OPTION))
def test_a_pushed_job_kept_pending_is_compact(kind: str) -> None:
    state = new_queue(NOW)

    def push() -> None:
        body = {"jobs": [{"payload": {"n": i}, **OPTION[kind](i)}
                         for i in range(N)]}
        jobs = parse_new_jobs(body)
        T.apply(state, push_of(jobs) if kind == "plain" else Push(tuple(jobs)),  # type: ignore[arg-type]
                NOW)
        codec.stamp(state, "w", NOW)
        codec.encode_parts(state)

    per, _ = traced_per(N, push)
    assert per < BOUND[kind], per
    data = b"".join(codec.encode_parts(state))
    assert data.count(b'"payload":{"n":') == N


def test_a_completed_jobs_result_kept_until_archived_is_compact() -> None:
    state = new_queue(NOW)
    T.apply(state, Push(tuple(NewJob(b'{"n":%d}' % i, priority=1) for i in range(N))), NOW)
    tokens = list(T.apply(state, Claim("w", N, 60_000), NOW).jobs.tokens)

    def complete() -> None:
        items = parse_complete({"items": [{"token": t, "result": {"r": i}}
                                          for i, t in enumerate(tokens)]})
        T.apply(state, Complete(items), NOW)
        codec.stamp(state, "w", NOW)
        codec.encode_parts(state)

    per, _ = traced_per(N, complete)
    assert per < 2_000, per  # (main: ~5,000 B traced a completed job)
    results = [state.jobs.entries[seq].result for seq in range(1, N + 1)]  # type: ignore[union-attr]
    assert results == [b'{"r":%d}' % i for i in range(N)]
