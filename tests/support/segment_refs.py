"""Segment keys, references and payloads for the pure tests of segments and
their objects' bytes (tests/unit/broker/model/segments/test_refs.py, test_segment_format.py)."""

from __future__ import annotations

from broker import paths
from broker.model.state import SegmentRef

#: A due time (ms): 2023-11-14T22:13:20.123Z.
T0 = 1_700_000_000_123


def key_of(first_seq: int, queue: str = "q", salt: str = "0a1b2c3d") -> str:
    """The key of the segment of ``queue`` from ``first_seq`` on (``salt`` as the broker's)."""
    return paths.segment_key(queue, paths.segment_name(first_seq, salt))


def ref_for(first_seq: int, count: int, priority: int = 0, run_at_ms: int = T0,
            taken: int = 0, queue: str = "q") -> SegmentRef:
    """A reference at etag ``etag-1`` to :func:`key_of` ``first_seq``."""
    return SegmentRef(key_of(first_seq, queue), "etag-1", first_seq, count, priority,
                      run_at_ms, taken)


def payloads(n: int) -> list[bytes]:
    """``n`` small JSON payloads: ``{"n":0}`` onwards."""
    return [b'{"n":%d}' % i for i in range(n)]
