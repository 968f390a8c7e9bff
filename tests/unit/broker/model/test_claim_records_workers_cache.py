"""broker.model.claim_records caches each worker name's JSON for the claim
records' lines (4,096 names at most): each entry a compact copy, not the 4 KB
buffer orjson.dumps made it in (16 MB for a full cache; broker.wire.compact)."""

from __future__ import annotations

from broker.model import claim_records
from tests.support.memory import traced_per

N = 2000


def test_the_worker_cache_keeps_compact_entries() -> None:
    claim_records._workers.clear()
    names = [f"worker-{i}" for i in range(N)]  # (made before: only the cache counts)
    per, encoded = traced_per(N, lambda: [claim_records._worker_json(w) for w in names])
    assert encoded == [b'"worker-%d"' % i for i in range(N)]
    assert claim_records._workers == dict(zip(names, encoded, strict=True))
    assert per < 500, per  # (main: ~4,100 B an entry)
    claim_records._workers.clear()
