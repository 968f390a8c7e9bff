"""The group commit of one compare-and-set object, generic over what it commits.

:class:`~broker.commit.loop.CommitLoop` gathers every operation that arrived
while the last write was in flight, applies them through a
:class:`~broker.commit.target.CommitTarget`, writes the result with one conditional
write, and answers each caller once that write has landed (or proves it cannot
land: :mod:`broker.commit.verdict`). Store calls leave the event loop through
:mod:`broker.commit.offloop`. Imports the storage layer and the leaves, never
:mod:`broker.model`: the rules come in through the ``CommitTarget`` protocol.

**Answers.** A caller awaiting ``CommitLoop.submit(op)`` gets the op's
result, or the exception raised: one the target raised to refuse the op, one
it returned as the op's outcome (a refusal that is written, answered once
the write landed), or the loop's own (storage, step-down, shutdown,
``OutcomeUnknown``).

**Outcomes.** A write whose outcome is open (a timeout, a 5xx, a 409/412)
is resolved by a re-read that judges each attempt of the batch landed,
pending, dead or unknown (:mod:`broker.commit.verdict`); nothing that may have
landed is undone.

**Faults.** Transient storage errors are retried with backoff up to
``commit_timeout_s`` per batch; past it the callers get ``OutcomeUnknown``
(if an attempt may have landed) or ``StorageUnavailable`` (if none did), and
the loop goes on. A permanent storage error (``StorageRefused``) is answered
at once. Any other exception (a corrupt object appearing, a bug) is answered
to the batch, the state is re-read before the next batch and the condition
is kept in ``CommitLoop.fault`` for health checks: no exception wedges the
loop. An idle loop parks until an operation arrives or the target's next
timer is due.

**Prepare.** Before a batch applies, ``CommitTarget.prepare`` loads what its ops
need that the pure model cannot read (the queue's segment lines). If it
refuses (an ``OsqueueError``: a segment object missing, say), the loop
re-reads the object once, since its state may be behind one that no longer
needs it, and tries again; a second refusal is the batch's answer
(``OutcomeUnknown`` if an earlier attempt of the batch may still land).

**Before the write.** Once a batch has applied and needs a write,
``CommitTarget.before_write`` may write immutable objects the new version will
reference (spill objects of jobs taken out of the head), then reference them:
they land before the version that references them. It runs again for every
attempt (a CAS conflict re-applies the batch to the re-read object), so the
objects of an attempt that did not land are left unreferenced for the sweep.
If it raises, the batch is answered with the error (``OutcomeUnknown`` if an
earlier attempt may still land) and the state is re-read.
"""

from broker.commit.loop import CommitLoop
from broker.commit.target import CommitTarget

__all__ = ["CommitLoop", "CommitTarget"]
