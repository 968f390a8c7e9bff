"""How many spill candidates a head holds, kept from what each commit changed,
so that the spill rule (:func:`broker.model.spills.plan_dead`) scans the head
only when it may spill. Pure: the state in, counts out.

The rule's candidates (dead jobs and, with ``pending``, pending job objects:
:func:`broker.model.spills.spillable`) are job objects of the head. Finding
them means visiting every job of the table, the untouched pushed lines too:
on a head of 640,000 pushed lines that is a scan of 640,000 entries, each
commit. A :class:`Tally` holds the candidates' count and estimated bytes by
block of seqs (:data:`broker.model.format.codec.BLOCK_SHIFT`); each commit
counts again only the blocks it changed, which are the encoder's dirty blocks
(``state.dirty_blocks``: every change of a job marks its block, or the head's
bytes would be wrong), before the encode clears them. A freshly decoded state
has every block dirty, so a tally of blocks the state no longer has can only
count too many, never too few: a tally past the rule's thresholds is checked
by the rule's own scan, and counted afresh if the scan disagrees."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from broker.model.job import Job
from broker.model.spills import estimated_bytes, spillable
from broker.model.state import QueueState


@dataclass(slots=True)
class Tally:
    """Spill candidates by block: block -> (jobs, estimated bytes), blocks with
    none left out, and their sums."""

    blocks: dict[int, tuple[int, int]] = field(default_factory=dict)
    jobs: int = 0
    bytes: int = 0

    def over(self, spill_jobs: int, spill_bytes: int) -> bool:
        """Whether the rule may spill: past ``spill_jobs`` candidates or
        ``spill_bytes`` of their bytes (never with ``spill_jobs`` 0)."""
        return spill_jobs > 0 and (self.jobs > spill_jobs or self.bytes > spill_bytes)


def count_blocks(state: QueueState, blocks: Iterable[int], pending: bool,
                 tally: Tally) -> None:
    """Count ``blocks`` of ``state`` again into ``tally`` (each block's figures
    replaced): O(the jobs of those blocks)."""
    entries, lists, kept = state.jobs.entries, state.block_jobs, tally.blocks
    for block in blocks:
        jobs = size = 0
        for entry in map(entries.get, lists.get(block, ())):
            # (most entries of a pushed block are untouched lines: a class test, the
            # cheapest per line; a seq gone since maps to None)
            if entry.__class__ is bytes or entry is None:
                continue
            job = cast(Job, entry)
            if spillable(job, pending):
                jobs += 1
                size += estimated_bytes(job)
        was_jobs, was_bytes = kept.pop(block, (0, 0))
        if jobs:
            kept[block] = (jobs, size)
        tally.jobs += jobs - was_jobs
        tally.bytes += size - was_bytes


def tally(state: QueueState, pending: bool) -> Tally:
    """Every block of ``state`` counted: O(the head's jobs)."""
    out = Tally()
    count_blocks(state, list(state.block_jobs), pending, out)
    return out
