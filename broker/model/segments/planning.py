"""Which grouped segments a batch of claims may reach, so the broker loads
only those whole (memory bounded by :data:`~broker.model.state.MAX_WINDOWS`
windows, not by the depth of the queue).

A claim of a queue that uses groups takes jobs group by group, in fair turns
(:mod:`broker.model.segments.grouped`), so the jobs it reaches are the heads
of the groups dispatch would pick first, not a prefix of the segments. The
broker holds two things of a grouped segment: its **directory** (its runs:
small, needed for every due one so the claim knows every group's runs, and
for stats) and its **lines** (a whole window: loaded only for the segments
a batch's claims may reach, planned here). A claim that reaches a run whose
lines are not loaded ends there (never out of order, never a job twice);
the next batch plans from the groups as that claim left them.

Pure and read-only: nothing here changes the state or its derived
structures (a plan is made before the batch applies, on the broker's clock
then; registering runs early could drop the runs of a segment not yet due
at the claim's own time).
"""

from __future__ import annotations

from broker.model.indexes import SEQ_MASK, ready_key
from broker.model.segments.refs import holding
from broker.model.state import MAX_WINDOWS, QueueState, SegmentRef

__all__ = ["claim_sources", "directories_wanted"]


def directories_wanted(state: QueueState, now_ms: int) -> list[SegmentRef]:
    """The grouped segments whose directories a claim at ``now_ms`` needs and
    ``state.windows`` does not hold: every due one with untaken jobs, and in
    fifo order every one (a fifo group's head may be a run not yet due)."""
    windows = state.windows
    fifo = state.settings.groups.get("group_order") == "fifo"
    return [ref for ref in state.segment_refs
            if ref.groups is not None and ref.remaining and (ref.run_at_ms <= now_ms or fifo)
            and (windows is None or not windows.has_directory(ref))]


def claim_sources(state: QueueState, budget: int, now_ms: int) -> list[SegmentRef]:
    """The grouped segments whose lines a batch of claims of at most
    ``budget`` jobs in all may reach at ``now_ms``, in pick order, at most
    :data:`MAX_WINDOWS` of them: the segments holding the next job of each of
    the first ``budget`` groups dispatch would pick (a best-first peek of its
    heap and of the parked groups a pick at ``now_ms`` wakes,
    :meth:`~broker.model.groups.dispatch.Dispatch.peek`: O(budget log
    budget), never O(groups)), then the first in claim order (due, priority,
    run-at, seq) of the grouped segments whose runs no claim has registered
    yet (after a load, a takeover, or a push by reference: the groups' heads
    are in the earliest segments, each group consuming its segments in
    order). A group served more than once in the batch, or freed by a
    settlement of the same batch, may reach a segment not planned: that claim
    ends there, and the next batch plans it."""
    if budget <= 0:
        return []
    refs = state.segment_refs
    out: dict[str, SegmentRef] = {}
    groups = state.groups
    if groups is not None:
        heaps, entries = groups.heaps, state.jobs.entries
        for gid in groups.dispatch.peek(budget, now_ms):
            heap = heaps.get(gid)
            if not heap:
                continue
            seq = heap[0] & SEQ_MASK  # (source_key: the seq in the low bits, fair or fifo)
            if seq in entries:
                continue  # (an inline job)
            at = holding(refs, seq)
            if at is None or refs[at].groups is None:
                continue  # (stale: taken since)
            ref = refs[at]
            out.setdefault(ref.key, ref)
            if len(out) >= MAX_WINDOWS:
                return list(out.values())
    fifo = state.settings.groups.get("group_order") == "fifo"
    known = groups.dirs if groups is not None else {}
    first = min(((ref.run_at_ms > now_ms, ready_key(ref.priority, ref.run_at_ms, ref.first_seq),
                  i) for i, ref in enumerate(refs)
                 if ref.groups is not None and ref.remaining and (ref.run_at_ms <= now_ms or fifo)
                 and (ref.key, ref.etag) not in known), default=None)
    if first is not None:  # (the first in claim order: due, then priority, run-at, seq)
        out.setdefault(refs[first[2]].key, refs[first[2]])
    return list(out.values())
