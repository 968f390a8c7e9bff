"""A queue whose pending jobs lie in a spill object, claims held at claim
records' spill parts (the model's ``held_in_records``), for the pure tests of
spill parts (tests/unit/broker/model/test_spill_parts*.py): the object's jobs
loaded as the broker loads them for a claim, and the head written and read
back as a broker does (its held-jobs cache carried over, or not: a new owner's
starts empty). Pure."""

from __future__ import annotations

from broker.model import tokens
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.spill_format import ErrorEntry, SpilledJob, encode_spills
from broker.model.format.spill_format import spill_jobs as read_spill
from broker.model.format.spill_refs import SpillRef, new_ref, redriven
from broker.model.job import DEAD, PENDING
from broker.model.ops import PushPayloads
from broker.model.spill_parts import spill_missing
from broker.model.spills import window_name
from broker.model.state import QueueState
from tests.support.spill_objects import ETAG, spill_key
from tests.support.states import new_queue, read_back

NOW = 1_767_225_600_000
LATER = NOW + 1_000
#: The error each spilled job failed with last (long: what makes inline lines big).
ERROR = "ValueError: boom " + "x" * 700


def spilled_jobs(n: int, first: int = 1, attempts: int = 1, max_attempts: int = 3,
                 kind: str = PENDING) -> list[SpilledJob]:
    """``n`` spilled jobs of seqs ``first ..``, due at ``NOW - 1000``, each with
    one failure (``ERROR``) at attempt ``attempts``."""
    return [SpilledJob(seq=seq, payload=b'{"n":%d}' % seq, priority=0, run_at_ms=NOW - 1000,
                       attempts=attempts, max_attempts=max_attempts, created_ms=NOW - 5000,
                       key=f"k{seq}" if seq % 2 else None,
                       errors=(ErrorEntry(attempts, NOW - 2000, ERROR),))
            for seq in range(first, first + n)]


def spill_queue(n: int, *, inline: int = 0, attempts: int = 1, max_attempts: int = 3,
                redrive: bool = False, load: bool = True) -> tuple[QueueState, SpillRef]:
    """A queue holding ``inline`` pushed jobs (seqs ``1 ..``) and one pending
    spill object of ``n`` jobs after them (loaded, with ``load``), claims held
    in records. ``redrive``: the object is a dead one redriven by reference
    (its jobs pending with no attempts, due at ``NOW``)."""
    state = new_queue(NOW)
    tokens.bind(state, "q", lambda k: b"k" * k)
    state.held_in_records = True
    if inline:
        T.apply(state, PushPayloads(tuple(b'{"i":%d}' % i for i in range(inline))), NOW - 1000)
    first = state.counters.enqueued + 1
    kind = DEAD if redrive else PENDING
    jobs = spilled_jobs(n, first, max_attempts if redrive else attempts, max_attempts, kind)
    (obj,) = encode_spills("q", kind, jobs)
    ref = new_ref(obj, spill_key(kind), ETAG)
    if redrive:
        ref = redriven(ref, NOW)
    state.counters.enqueued += n
    state.spill_refs.append(ref)
    if load:
        load_spill(state, ref, obj.data)
    spill_data[ref.key] = obj.data
    return state, ref


#: The bytes of the spill objects :func:`spill_queue` made, by key (the "store").
spill_data: dict[str, bytes] = {}


def load_spill(state: QueueState, ref: SpillRef, data: bytes | None = None) -> None:
    """Load ``ref``'s jobs as the broker does for a claim (all of them, as the
    ref shows them)."""
    data = spill_data[ref.key] if data is None else data
    state.spill_windows[window_name(ref)] = read_spill(data, ref, 0, ref.count)


def load_held(state: QueueState) -> None:
    """Load what the broker's prepare loads for the records' spill parts
    (every record's: :func:`broker.model.spill_parts.spill_missing`)."""
    for ref, fence, span in spill_missing(state, dict(state.claim_records)):
        jobs = read_spill(spill_data[ref.key], ref, 0, ref.count)
        state.held.put_spilled(fence, span, ref, jobs[span[3]:span[3] + span[1]])


def write_back(state: QueueState, *, keep_cache: bool = True) -> tuple[bytes, QueueState]:
    """The head as written now, and what it decodes to: its held-jobs cache and
    spill windows carried over (the same broker) or not (a new owner's)."""
    codec.stamp(state, "b", LATER, "c-x")
    data = codec.encode(state)
    again = read_back(data)
    again.held_in_records = True
    if keep_cache:
        again.held, again.spill_windows = state.held, state.spill_windows
    tokens.bind(again, "q", lambda k: b"k" * k)
    return data, again
