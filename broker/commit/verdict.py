"""Outcomes of the commit loop: what became of a write attempt whose outcome
was open, and how the callers waiting on a batch are answered.

Every write attempt carries its own identity (:func:`new_commit_id`, a fresh
random id the target stamps into the object, which also keeps the ids of the
last few versions: its lineage). When a write fails in a way that leaves its
outcome open (a timeout, a 5xx, a dropped reply, or a 409/412 that may be the
store's own retry of a write that landed) the commit loop re-reads the object
and asks :func:`verdict`, for each attempt of the batch:

* :attr:`Verdict.LANDED`: its id is in the lineage: it landed (perhaps under
  a newer version); the callers get that attempt's results;
* :attr:`Verdict.PENDING`: the object is still the version it was written
  over: not landed yet (it may still land); write again, as a new attempt;
* :attr:`Verdict.DEAD`: the version it was written over is in the lineage,
  followed by another (or the object was deleted, or the lineage reaches
  the object's first version): it can never land; re-apply the batch to the
  fresh state and write again;
* :attr:`Verdict.UNKNOWN`: too many versions since, or an object without
  lineage: nobody can tell; the callers get ``OutcomeUnknown``, and nothing
  that may have landed is undone.

A caller waits on a :class:`Waiter`; :func:`answer` gives it its result or
raises its error in it (``future.set_exception``).

The verdict compares etags only for "still the same version": it relies on
every version's bytes being new (the queue object's ``seq`` grows on every
write), so a store whose etags are content hashes never shows an A-B-A.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeAlias, TypeVar

from broker.errors import OsqueueError, OutcomeUnknown

OpT = TypeVar("OpT")
ResultT = TypeVar("ResultT")

#: What one operation of a batch answers: its result, or the error to raise.
#: (An error may be an outcome that is written: a refusal kept as a receipt.)
Outcome: TypeAlias = ResultT | OsqueueError


def new_commit_id() -> str:
    """A fresh identity for one write attempt (96 random bits)."""
    return "c-" + uuid.uuid4().hex[:24]


class Verdict(enum.Enum):
    LANDED = "landed"
    PENDING = "pending"
    DEAD = "dead"
    UNKNOWN = "unknown"


@dataclass(slots=True)
class Attempt(Generic[ResultT]):
    """One write attempt of a batch, and what it would answer if it landed."""

    commit: str
    base_commit: str | None  # the version it was written over (None: unknown or absent)
    base_etag: str | None  # None: it tried to create the object
    outcomes: list[ResultT | OsqueueError]


def verdict(attempt: Attempt[ResultT], *, lineage: Sequence[str], seq: int,
            etag: str | None) -> Verdict:
    """What became of ``attempt``, judged from the re-read object: its
    ``lineage`` (recent commit ids, newest last), its version number ``seq``
    and its ``etag`` (None: the object does not exist)."""
    if attempt.commit in lineage:
        return Verdict.LANDED
    if etag == attempt.base_etag:
        return Verdict.PENDING  # still the version it was written over: it may yet land
    if attempt.base_etag is not None and etag is None:
        return Verdict.DEAD  # the object was deleted: a conditional write on it cannot land
    if attempt.base_commit is not None and attempt.base_commit in lineage:
        return Verdict.DEAD  # the version after its base is someone else's
    if attempt.base_etag is None and len(lineage) >= seq:
        return Verdict.DEAD  # the lineage reaches the object's first version
    return Verdict.UNKNOWN


def outcome_unknown(key: str, cause: BaseException | None) -> OutcomeUnknown:
    """The answer to callers whose write may or may not have landed."""
    return OutcomeUnknown(
        f"the write carrying this call to {key} may or may not have landed "
        f"({cause}); nothing was undone: repeat the call to learn its outcome")


@dataclass(slots=True)
class Waiter(Generic[OpT, ResultT]):
    """One caller's operation, and the future it awaits."""

    op: OpT
    future: asyncio.Future[ResultT]


def answer(item: Waiter[OpT, ResultT], outcome: Outcome[ResultT]) -> None:
    """Answer one caller (unless it stopped waiting): its result, or raise its error."""
    if item.future.done():
        return
    if isinstance(outcome, OsqueueError):
        item.future.set_exception(outcome)
    else:
        item.future.set_result(outcome)


def answer_all(items: Iterable[Waiter[OpT, ResultT]], error: OsqueueError) -> None:
    """Raise ``error`` in every caller of ``items`` still waiting."""
    for item in items:
        answer(item, error)
