"""Queue states for the pure tests: a new queue with its token key, jobs pushed,
and a state committed as a broker writes it (stamped, encoded, read back)."""

from __future__ import annotations

from broker.model import tokens
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.ops import PushPayloads
from broker.model.state import QueueSettings, QueueState

#: The pure tests' queue name and token key (any 32 bytes do; a broker draws them).
QUEUE = "q"
KEY = bytes(range(32))


def new_queue(now: int = 0, settings: QueueSettings | None = None, queue: str = QUEUE,
              key: bytes = KEY) -> QueueState:
    """An empty queue, as a broker makes one: bound to its token key."""
    state = T.new_state(now, settings)
    tokens.bind(state, queue, lambda n: key[:n])
    return state


def queue_of(n: int, now: int) -> QueueState:
    """A new queue with ``n`` jobs ``{"n": i}`` pushed at ``now``."""
    state = new_queue(now)
    T.apply(state, PushPayloads(tuple(b'{"n":%d}' % i for i in range(n))), now)
    return state


def read_back(data: bytes, queue: str = QUEUE) -> QueueState:
    """A state decoded from an object's bytes and bound as a broker binds it (an
    object without a token key gets :data:`KEY`)."""
    state = decode_state(data)
    tokens.bind(state, queue, lambda n: KEY[:n])
    return state


def committed(state: QueueState, now: int, commit: str = "c-1") -> QueueState:
    """Stamp and encode ``state`` (filling every line cache), then decode what was
    written."""
    codec.stamp(state, "w", now, commit)
    return read_back(b"".join(codec.encode_parts(state)))


def tagged(token: str, queue: str = QUEUE, key: bytes = KEY) -> str:
    """A stored token (``j0000000001.1``) as the pure tests' queue hands it out."""
    return tokens.Tagger(key, queue).tag(token)
