"""A deep queue whose head references segment objects of both formats (issue
20): version 1 (each line the job's whole head line, as brokers before
segment format 2 wrote them; :mod:`tests.support.segment_v1`, and the golden
object a broker of that version wrote) and version 2 (a header with
``created_at`` and ``max_attempts``, then payloads; what the broker writes
now). Written straight to a store (head encoded with the model's codec), no
broker record: the first broker to write to it takes it over.

The queue :func:`write_mixed` leaves, by seq (``now``: its argument, ms):

* 1-4: segment A, version 1, priority 0, due ``now`` - 600 s, made ``now``
  - 1200 s, max_attempts 2;
* 5-9: segment B, version 2, priority 0, due ``now`` - 300 s, made ``now``
  - 900 s, max_attempts 3;
* 10: inline in the head, priority 0, pushed (due and made) ``now`` - 450 s;
* 1001-1005: segment C, the golden version-1 object (priority 2, due
  2026-11-22T03:43:47.123Z, made a minute before, max_attempts 5, odd
  payloads: a big integer, escaped text);
* 1006-1008: segment D, version 2, priority 2, due a second before C, made
  a second before C's jobs, max_attempts 1;
* 1009-1011: segment E, version 2, priority 0, due ``now`` - 700 s, made
  ``now`` - 800 s, max_attempts 4.

So the claim order (priority high first, then due time, then seq) runs D, C,
E, A, 10, B: across formats both ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker import paths, timefmt
from broker.model import transitions as T
from broker.model.format import segment_format
from broker.model.ops import PushPayloads
from broker.model.state import SegmentRef
from broker.storage import ObjectStore
from tests.support.segment_v1 import encode_segment_v1
from tests.support.segmented import put_head
from tests.support.states import new_queue

GOLDEN_V1 = Path(__file__).parents[1] / "fixtures" / "golden_segment_v1.jsonl"
_PAYLOAD = b'"payload":'


@dataclass(frozen=True)
class Pending:
    """A job as the queue holds it before anything touched it (times in ms;
    the payload as its JSON bytes, verbatim)."""

    seq: int
    priority: int
    run_ms: int
    created_ms: int
    max_attempts: int
    payload: bytes
    segment: str | None  # the key of its segment; None: inline

    @property
    def id(self) -> str:
        return f"j{self.seq:010d}"


@dataclass
class Mixed:
    """What :func:`write_mixed` wrote: the head's segment references (A, B, C,
    D, E) and every job, by id in seq order."""

    refs: list[SegmentRef]
    jobs: dict[str, Pending]

    def claim_order(self) -> list[str]:
        """The ids in the order claims take them."""
        return [job.id for job in sorted(self.jobs.values(),
                                         key=lambda j: (-j.priority, j.run_ms, j.seq))]


def _golden() -> tuple[bytes, int, int, list[bytes]]:
    """The golden version-1 object: its bytes, due time, creation time and
    payloads (bytes as written)."""
    data = GOLDEN_V1.read_bytes()
    lines = data.splitlines()[1:]
    run_ms = segment_format.read_header(data, str(GOLDEN_V1)).run_at_ms
    created = timefmt.parse(lines[0].split(b'"created_at":"', 1)[1][:24].decode())
    return data, run_ms, created, [line[line.index(_PAYLOAD) + len(_PAYLOAD):-1]
                                   for line in lines]


def write_mixed(store: ObjectStore, now: int, queue: str = "q") -> Mixed:
    """Write the queue of this module's docstring (``queue`` must be ``"q"``:
    the golden object names it); return it."""
    jobs: list[Pending] = []
    refs: list[SegmentRef] = []

    def segment(tag: str, first: int, data: bytes, count: int, priority: int, run_ms: int,
                created: int, max_attempts: int, payloads: list[bytes]) -> None:
        key = paths.segment_key(queue, paths.segment_name(first, f"{tag * 2}{first:06x}"))
        refs.append(SegmentRef(key, store.create_if_absent(key, data), first, count,
                               priority, run_ms))
        jobs.extend(Pending(seq, priority, run_ms, created, max_attempts, payload, key)
                    for seq, payload in enumerate(payloads, first))

    def v1(tag: str, first: int, priority: int, run_ms: int, created: int,
           max_attempts: int, payloads: list[bytes]) -> None:
        segment(tag, first, encode_segment_v1(
            queue, first, priority, run_ms, payloads, max_attempts=max_attempts,
            created_ms=created), len(payloads), priority, run_ms, created, max_attempts,
            payloads)

    def v2(tag: str, first: int, priority: int, run_ms: int, created: int,
           max_attempts: int, payloads: list[bytes]) -> None:
        segment(tag, first, segment_format.encode_segment(
            queue, first, priority, run_ms, payloads, max_attempts=max_attempts,
            created_ms=created), len(payloads), priority, run_ms, created, max_attempts,
            payloads)

    def made(tag: str, seqs: range) -> list[bytes]:
        return [b'{"seg":"%s","n":%d}' % (tag.encode(), seq) for seq in seqs]

    v1("a", 1, 0, now - 600_000, now - 1_200_000, 2, made("A", range(1, 5)))
    v2("b", 5, 0, now - 300_000, now - 900_000, 3, made("B", range(5, 10)))
    golden, c_run, c_made, c_payloads = _golden()
    segment("c", 1001, golden, 5, 2, c_run, c_made, 5, c_payloads)
    v2("d", 1006, 2, c_run - 1000, c_made - 1000, 1, made("D", range(1006, 1009)))
    v2("e", 1009, 0, now - 700_000, now - 800_000, 4, made("E", range(1009, 1012)))

    state = new_queue(now - 1_200_000, queue=queue)
    state.counters.enqueued = 9  # (1-9 are the segments')
    inline = b'{"inline":10}'
    T.apply(state, PushPayloads((inline,)), now - 450_000)
    jobs.append(Pending(10, 0, now - 450_000, now - 450_000, 3, inline, None))
    state.counters.enqueued = 1011
    state.segment_refs = refs
    put_head(store, queue, state)
    return Mixed(refs, {job.id: job for job in sorted(jobs, key=lambda j: j.seq)})
