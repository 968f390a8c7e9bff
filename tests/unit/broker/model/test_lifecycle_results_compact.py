"""broker.model.lifecycle.complete_held keeps a completed job's result in the
head until its archive is written: a compact copy there, not the 4 KB buffer
orjson.dumps made it in (broker.wire.compact), the bytes as given."""

from __future__ import annotations

import orjson

from broker.model import transitions as T
from broker.model.job import COMPLETED, Job
from broker.model.ops import Claim, Complete, CompleteItem, NewJob, Push
from tests.support.memory import traced_per
from tests.support.states import new_queue

NOW = 1_767_225_600_000
N = 2000


def test_a_completed_jobs_result_is_kept_compact() -> None:
    state = new_queue(NOW)
    T.apply(state, Push(tuple(NewJob(b'{"n":%d}' % i, priority=1) for i in range(N))), NOW)
    tokens = list(T.apply(state, Claim("w", N, 60_000), NOW).jobs.tokens)
    T.apply(state, Complete((CompleteItem(tokens[0], None),)), NOW)  # (a None stays None)

    def complete() -> None:
        T.apply(state, Complete(tuple(CompleteItem(t, orjson.dumps({"r": i}))
                                      for i, t in enumerate(tokens[1:], 1))), NOW)

    per, _ = traced_per(N - 1, complete)
    jobs = [state.jobs.entries[seq] for seq in range(1, N + 1)]
    assert all(isinstance(j, Job) and j.status == COMPLETED for j in jobs)
    assert [j.result for j in jobs] == [None] + [  # type: ignore[union-attr]
        b'{"r":%d}' % i for i in range(1, N)]
    assert per < 1_000, per  # (main: ~4,100 B traced a completion, its result's buffer)
