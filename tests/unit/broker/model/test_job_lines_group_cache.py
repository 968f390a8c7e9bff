"""broker.model.job_lines caches each group name's JSON for the grouped lines
of a push (4,096 names at most): each entry a compact copy, not the 4 KB buffer
orjson.dumps made it in (16 MB for a full cache; broker.wire.compact)."""

from __future__ import annotations

from broker.model import job_lines
from broker.model.job_lines import new_grouped_pending_lines
from tests.support.memory import traced_per

NOW = 1_767_225_600_000
N = 2000


def test_the_group_cache_keeps_compact_entries() -> None:
    job_lines._group_json.clear()
    names = [f"tenant-{i}" for i in range(N)]  # (made before: only the cache counts)
    payloads = [b"{}"] * N
    per, lines = traced_per(N, lambda: new_grouped_pending_lines(1, payloads, names, NOW, 3))
    assert job_lines._group_json == {n: b'"%s"' % n.encode() for n in names}
    assert all(b'"group":"tenant-%d"' % i in line for i, line in enumerate(lines))
    assert per < 1_000, per  # (a line and its cache entry; main: ~4,300 B)
    job_lines._group_json.clear()
