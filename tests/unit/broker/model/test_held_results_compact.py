"""broker.model.held.complete_position keeps the result of a job held at a
segment part in its claim record's done entry until the archive: a compact
copy there, not the 4 KB buffer orjson.dumps made it in (broker.wire.compact);
the head written and read back (broker.model.format.claims_format) keeps it
compact too, the bytes as given."""

from __future__ import annotations

import orjson

from broker.model import transitions as T
from broker.model.ops import Claim, Complete, CompleteItem
from tests.support.held_records import LATER, held_queue, write_back
from tests.support.memory import traced_per

N = 2000


def _results(state: object) -> list[bytes | None]:
    return [r for record in state.claim_records.values()  # type: ignore[attr-defined]
            for entry in record.completions or () for r in entry.results]


def test_a_held_jobs_result_is_kept_compact() -> None:
    state, _, _ = held_queue(N)
    tokens = list(T.apply(state, Claim("w", N, 60_000), LATER).jobs.tokens)
    assert state.claim_records and all(r.segs for r in state.claim_records.values())

    def complete() -> None:
        T.apply(state, Complete(tuple(CompleteItem(t, orjson.dumps({"r": i}))
                                      for i, t in enumerate(tokens))), LATER)

    per, _ = traced_per(N, complete)
    assert _results(state) == [b'{"r":%d}' % i for i in range(N)]
    assert per < 1_000, per  # (main: ~4,100 B traced a completion, its result's buffer)


def test_a_held_jobs_result_read_back_is_compact() -> None:
    state, _, _ = held_queue(N)
    tokens = list(T.apply(state, Claim("w", N, 60_000), LATER).jobs.tokens)
    T.apply(state, Complete(tuple(CompleteItem(t, None if i == 0 else b'{"r":%d}' % i)
                                  for i, t in enumerate(tokens))), LATER)
    per, (_, again) = traced_per(N, lambda: write_back(state))
    assert _results(again) == [None] + [b'{"r":%d}' % i for i in range(1, N)]
    assert per < 1_500, per  # (broker.model.format.claims_format; main: ~4,200 B)
