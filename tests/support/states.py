"""Queue states for the pure tests: jobs pushed, and a state committed as a broker
writes it (stamped, encoded, read back)."""

from __future__ import annotations

from broker.model import codec
from broker.model import transitions as T
from broker.model.decode import decode_state
from broker.model.ops import PushPayloads
from broker.model.state import QueueState


def queue_of(n: int, now: int) -> QueueState:
    """A new queue with ``n`` jobs ``{"n": i}`` pushed at ``now``."""
    state = T.new_state(now)
    T.apply(state, PushPayloads(tuple(b'{"n":%d}' % i for i in range(n))), now)
    return state


def committed(state: QueueState, now: int, commit: str = "c-1") -> QueueState:
    """Stamp and encode ``state`` (filling every line cache), then decode what was
    written."""
    codec.stamp(state, "w", now, commit)
    return decode_state(b"".join(codec.encode_parts(state)))
