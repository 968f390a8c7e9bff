"""Version-1 segment objects, as brokers before segment format 2 wrote them:
to test that they are still read (the broker never writes one now). The
bytes are pinned by ``tests/fixtures/golden_segment_v1.jsonl``, which
a broker of that version wrote."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from broker import timefmt
from broker.model.job_lines import pending_format


def encode_segment_v1(queue: str, first_seq: int, priority: int, run_at_ms: int,
                      payloads: Sequence[bytes], *, max_attempts: int,
                      created_ms: int | None = None) -> bytes:
    """A version-1 segment: a header without creation time and max_attempts,
    then each job's whole line of the queue object. Unchecked: for tests."""
    header = orjson.dumps({
        "format": "osqueue-segment", "version": 1, "queue": queue, "first_seq": first_seq,
        "count": len(payloads), "priority": priority, "run_at": timefmt.fmt(run_at_ms)})
    created = run_at_ms if created_ms is None else created_ms
    line = pending_format(priority, run_at_ms, created, max_attempts) + b"\n"
    return header + b"\n" + b"".join(
        line % (seq, seq, payload) for seq, payload in enumerate(payloads, first_seq))
