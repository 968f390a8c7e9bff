"""A queue whose claims from a segment are held in claim records (the model's
``held_in_records``), for the tests of held jobs: one segment of ``n`` jobs,
loaded as the broker loads windows, and the head written and read back as a
broker does (its held-jobs cache carried over: one per queue). Pure."""

from __future__ import annotations

from broker.model import tokens
from broker.model.format import codec
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import new_queue, read_back

NOW = 1_767_225_600_000
LATER = NOW + 1_000


def held_queue(n: int, *, load: bool = True) -> tuple[QueueState, SegmentRef, list[bytes]]:
    """A queue holding one segment of ``n`` jobs (loaded), claims held in records."""
    state = new_queue(NOW)
    tokens.bind(state, "q", lambda k: b"k" * k)
    state.windows = SegmentWindows()
    state.held_in_records = True
    first = state.counters.enqueued + 1
    payloads = [b'{"n":%d}' % (first + i) for i in range(n)]
    data = encode_segment("q", first, 0, NOW, payloads, max_attempts=2)
    ref = SegmentRef(segment_key("q", segment_name(first, "0123abcd")), '"e1"', first, n, 0, NOW)
    state.counters.enqueued += n
    state.segment_refs.append(ref)
    if load:
        state.windows.put(ref, 0, segment_lines(data, ref))
    return state, ref, payloads


def write_back(state: QueueState) -> tuple[bytes, QueueState]:
    """The head as written now, and what it decodes to (its held lines carried
    over, as the broker's cache is: one per queue)."""
    codec.stamp(state, "b", LATER, "c-x")
    data = codec.encode(state)
    again = read_back(data)
    again.windows, again.held, again.held_in_records = state.windows, state.held, True
    tokens.bind(again, "q", lambda k: b"k" * k)
    return data, again
