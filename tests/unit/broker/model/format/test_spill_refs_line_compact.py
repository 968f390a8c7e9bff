"""broker.model.format.spill_refs.ref_bytes keeps a spill ref's line on the
ref (every commit writes every ref): a compact copy, not the 4 KB buffer
orjson.dumps made it in (broker.wire.compact), the same bytes as
ref_to_json's."""

from __future__ import annotations

import orjson

from broker.model.format.spill_refs import SpillRef, ref_bytes, ref_to_json
from broker.model.job import DEAD
from tests.support.memory import traced_per
from tests.support.spill_objects import ETAG, spill_key

NOW = 1_767_225_600_000
N = 2000


def test_a_refs_kept_line_is_compact() -> None:
    refs = [SpillRef(spill_key(DEAD, 100 + i), ETAG, DEAD, 1, (100 + i, 100 + i), NOW,
                     first=(0, 100 + i)) for i in range(N)]
    per, lines = traced_per(N, lambda: [ref_bytes(ref) for ref in refs])
    assert [ref.line for ref in refs] == lines
    assert lines == [orjson.dumps(ref_to_json(ref)) for ref in refs]
    assert per < 1_000, per  # (main: ~4,100 B a ref)
