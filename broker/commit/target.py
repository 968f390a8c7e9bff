"""What the group-commit loop (:mod:`broker.commit.loop`) commits: the
:class:`CommitTarget` protocol an object implements to be committed by it, and
the loop's counters.

A target describes a state of type ``StateT`` (decoded from and encoded to one
object), operations ``OpT`` that change it and the results ``ResultT`` they
answer; it also carries the rules that run on every commit (housekeeping),
the objects a version references that are written before it (``before_write``),
who may write (``may_write``) and what follows a commit (``committed``): the
loop itself holds no business rules. :class:`broker.service.queue_target.QueueTarget`
is the queue's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from broker.errors import OsqueueError
from broker.storage import Data

StateT = TypeVar("StateT")
OpT = TypeVar("OpT")
ResultT = TypeVar("ResultT")
ResultT_co = TypeVar("ResultT_co", covariant=True)


class CommitTarget(Protocol[StateT, OpT, ResultT_co]):
    """What the loop needs to know about the object it commits: a state of type
    ``StateT`` changed by operations ``OpT`` that answer ``ResultT``."""

    def decode(self, data: bytes) -> StateT:
        """Parse a committed version; raise ``StateError`` if it is not one."""
        ...

    def empty(self, now_ms: int) -> StateT: ...

    def apply(self, state: StateT, op: OpT,
              now_ms: int) -> tuple[ResultT_co | OsqueueError, bool]:
        """Apply one op: (outcome, changed). Raise ``OsqueueError`` to refuse it
        unchanged; return one as the outcome to refuse it once the change (a
        receipt of the refusal, say) is written."""
        ...

    async def prepare(self, state: StateT, ops: Sequence[OpT], now_ms: int) -> None:
        """Before ``ops`` apply to ``state``: load what applying them needs and
        the pure model cannot read (I/O happens here, never in ``apply``).
        Raise an ``OsqueueError`` to refuse the batch: the loop re-reads the
        object once and tries again, then answers the batch with it (after a
        write of the batch was attempted, which may land: ``OutcomeUnknown`` at once)."""
        ...

    async def before_write(self, state: StateT, now_ms: int) -> None:
        """After a batch applied to ``state`` (at ``now_ms``, ms) and before
        ``state`` is encoded and written: write the immutable objects the new
        version will reference (under fresh keys, never replacing one), then
        reference them in ``state`` (a last pure change). Runs once for each
        write attempt, so after a CAS conflict the batch applies to the re-read
        state and this runs again: the objects of the attempt that did not land
        are left unreferenced, for the sweep.

        Should not raise for a failed object write: leave ``state`` as the batch
        left it (valid, only larger), for a later batch to try again. Anything
        it raises fails the whole batch like a storage fault: the state is
        dropped and re-read, and every caller answered with the error
        (``OutcomeUnknown`` where an earlier attempt of the batch may land)."""
        ...

    def housekeeping(self, state: StateT, now_ms: int, exists: bool) -> list[OpT]:
        """Ops the owner runs on every commit (lease renewal, takeover, reclaim)."""
        ...

    def encode(self, state: StateT, writer: str, now_ms: int, commit: str) -> Data:
        """Stamp the state as the next version, made by write attempt ``commit``."""
        ...

    def identity(self, state: StateT) -> tuple[str | None, Sequence[str]]:
        """(commit id of this version, the lineage: recent commit ids, newest last)."""
        ...

    def seq(self, state: StateT) -> int:
        """The version number (grows by one a write)."""
        ...

    def may_write(self, state: StateT, owned: bool) -> OsqueueError | None:
        """None if this writer may write over committed ``state``, else the error
        to answer. ``owned``: a write of this writer landed since it (re)started."""
        ...

    def committed(self, state: StateT) -> None:
        """``state`` is a committed version (written by us or re-read): start
        whatever must follow a commit (archive objects)."""
        ...

    def carry(self, dropped: StateT, fresh: StateT, now_ms: int) -> None:
        """The loop dropped ``dropped`` for the re-read ``fresh``: move into
        ``fresh`` what only the dropped state held and must not be lost (changes
        kept in memory to be written later)."""
        ...

    def next_timer_ms(self, state: StateT, now_ms: int) -> int | None: ...


@dataclass(slots=True)
class CommitStats:
    """What one loop has done, for stats and metrics (counts since it started)."""

    commits: int = 0
    conflicts: int = 0
    unknown_outcomes: int = 0  # writes whose outcome had to be resolved by a re-read
    answered_unknown: int = 0  # batches answered OutcomeUnknown
    step_downs: int = 0
    faults: int = 0
    last_commit_s: float = 0.0
    last_batch: int = 0
    state_bytes: int = 0


def apply_batch(target: CommitTarget[StateT, OpT, ResultT], state: StateT, ops: Sequence[OpT],
                now_ms: int, exists: bool,
                ) -> tuple[list[ResultT | OsqueueError], bool, tuple[int, Exception] | None]:
    """Apply the target's housekeeping, then ``ops`` in order, to ``state`` (in
    place): (each op's outcome, whether the state needs a write, the first op
    whose apply raised anything but an ``OsqueueError`` and what it raised).

    An op refused with an ``OsqueueError`` has that error as its outcome and
    changed nothing. Applying stops at an op that raised anything else: it may
    have half-applied the state, which the caller must then drop. A change made
    by housekeeping alone needs no write while the object does not exist.
    """
    changed = False
    outcomes: list[ResultT | OsqueueError] = []
    for op in target.housekeeping(state, now_ms, exists):
        _, did = target.apply(state, op, now_ms)
        changed = changed or (did and exists)
    for index, op in enumerate(ops):
        try:
            outcome, did = target.apply(state, op, now_ms)
        except OsqueueError as exc:
            outcome, did = exc, False
        except Exception as exc:  # a bug, or input no check foresaw
            return outcomes, changed, (index, exc)
        outcomes.append(outcome)
        changed = changed or did
    return outcomes, changed, None
