"""Segment keys, references and payloads for the pure tests of segments and
their objects' bytes (tests/unit/broker/model/segments/test_refs.py, test_segment_format.py),
and a grouped segment pushed by reference into a state (the grouped claims' tests)."""

from __future__ import annotations

from broker import paths
from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.directories import group_major
from broker.model.ops import PushPayloads, Reserve
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from tests.support.states import QUEUE

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


def push_grouped_segment(state: QueueState, groups: list[str | None], now: int,
                         max_attempts: int = 3) -> int:
    """A grouped segment of ``len(groups)`` jobs (payloads ``100`` onwards, group-major
    as the broker writes it) pushed by reference into ``state`` at ``now``, due then,
    its lines loaded into ``state.windows``; its first seq."""
    first = T.apply(state, Reserve(len(groups), 8), now).ids.first
    gm = group_major([b"%d" % (100 + i) for i in range(len(groups))], groups)
    assert gm.runs is not None
    data = encode_segment(QUEUE, first, 0, now, gm.payloads, max_attempts=max_attempts,
                          groups=gm.runs)
    ref = SegmentRef(paths.segment_key(QUEUE, paths.segment_name(first, "0123abcd")),
                     f'"e{first}"', first, len(groups), 0, now, groups=len(gm.runs))
    if state.windows is None:
        state.windows = SegmentWindows()
    T.apply(state, PushPayloads((), refs=(ref,)), now)
    state.windows.put_grouped(ref, segment_lines(data, ref), gm.runs)
    return first
