"""broker.model.format.decode (a head read at takeover) keeps each job of the
head as a Job: its payload and result compact copies, not the 4 KB buffers
orjson.dumps made while confirming their spans (broker.wire.compact), for a
head laid out as the broker writes it and for one laid out by hand."""

from __future__ import annotations

import orjson
import pytest

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import Job
from broker.model.ops import Claim, Complete, CompleteItem, NewJob, Push
from tests.support.memory import traced_per
from tests.support.states import new_queue, read_back

NOW = 1_767_225_600_000
N = 2000


def _head() -> bytes:
    """``N`` jobs with a priority, the even ones completed with a result."""
    state = new_queue(NOW)
    T.apply(state, Push(tuple(NewJob(b'{"n":%d}' % i, priority=1) for i in range(N))), NOW)
    tokens = list(T.apply(state, Claim("w", N, 60_000), NOW).jobs.tokens)
    T.apply(state, Complete(tuple(CompleteItem(t, b'{"r":%d}' % i)
                                  for i, t in enumerate(tokens) if i % 2 == 0)), NOW)
    codec.stamp(state, "w", NOW, "c-1")
    return codec.encode(state)


@pytest.mark.parametrize("layout", ["ours", "by hand"])
def test_a_decoded_heads_payloads_and_results_are_compact(layout: str) -> None:
    data = _head()
    if layout == "by hand":  # (no job on a line of its own: every value re-encoded)
        data = orjson.dumps(orjson.loads(data), option=orjson.OPT_INDENT_2)
    per, state = traced_per(N, lambda: read_back(data))
    jobs = [state.jobs.entries[seq] for seq in range(1, N + 1)]
    assert all(isinstance(j, Job) for j in jobs)
    assert [j.payload for j in jobs] == [b'{"n":%d}' % i for i in range(N)]  # type: ignore[union-attr]
    assert [j.result for j in jobs] == [  # type: ignore[union-attr]
        b'{"r":%d}' % i if i % 2 == 0 else None for i in range(N)]
    # (main: ~6,700 B traced a decoded job, half of them completed)
    assert per < 3_000, per
