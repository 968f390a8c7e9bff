"""broker.model.spill_compaction, the compaction of dead spill refs: which small dead refs a commit
merges once they pile up (to_compact), the merged objects' jobs (merged: the
live ones, each as it was) and the change of the head's list (compact: in place,
the old refs dropped; a stale merge refused, nothing changed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.model import spill_compaction, transitions
from broker.model.format.spill_format import ErrorEntry
from broker.model.format.spill_format import spill_jobs as read_spill
from broker.model.format.spill_refs import SpillRef, new_ref, redriven, with_out
from broker.model.job import DEAD
from broker.model.state import QueueState
from tests.support.spill_objects import ETAG, T0, spill_key, spilled, written


def _refs(n: int, per: int = 3) -> tuple[list[SpillRef], list[list]]:
    """``n`` dead refs of ``per`` jobs each (seqs apart), and each one's jobs as read."""
    refs, jobs = [], []
    for i in range(n):
        group = [spilled(i * per + k + 1, attempts=1, max_attempts=1,
                         errors=(ErrorEntry(1, T0, f"boom {i * per + k + 1}"),))
                 for k in range(per)]
        (obj, _), = written(DEAD, group)
        ref = new_ref(obj, spill_key(DEAD, 100 + i), ETAG)
        refs.append(ref)
        jobs.append(read_spill(obj.data, ref))
    return refs, jobs


def _state(refs: list[SpillRef]) -> QueueState:
    state = transitions.new_state(T0)
    state.spill_refs = list(refs)
    return state


def test_up_to_compact_refs_small_dead_refs_are_left_as_they_are() -> None:
    refs, _ = _refs(spill_compaction.COMPACT_REFS)
    assert spill_compaction.to_compact(_state(refs)) == []


def test_past_compact_refs_the_smallest_are_merged_up_to_merged_jobs() -> None:
    refs, _ = _refs(spill_compaction.COMPACT_REFS + 1)
    big = replace(refs[0], count=spill_compaction.SMALL_REF_JOBS, seqs=(10**6, 10**6 + 10**5))
    state = _state([big, *refs[1:], replace(refs[0], key=spill_key(DEAD, 999))])
    picked = spill_compaction.to_compact(state)
    assert big not in picked and len(picked) == spill_compaction.COMPACT_REFS + 1
    # (by live jobs, smallest first, while they fit one object)
    wide = [replace(ref, count=spill_compaction.MERGED_JOBS // 8 - 1, seqs=(ref.seqs[0], 10**7 + i))
            for i, ref in enumerate(refs)]
    small = replace(refs[0], key=spill_key(DEAD, 998))
    picked = spill_compaction.to_compact(_state([*wide, small]))
    assert picked[0] == small and len(picked) == 9
    assert sum(ref.live for ref in picked) <= spill_compaction.MERGED_JOBS


def test_pending_refs_and_refs_named_in_skip_are_never_merged() -> None:
    refs, _ = _refs(spill_compaction.COMPACT_REFS + 1)
    state = _state([redriven(refs[0], T0), *refs[1:]])
    assert spill_compaction.to_compact(state) == []
    state = _state(refs)
    assert spill_compaction.to_compact(state, frozenset({refs[3].key})) == []


def test_merged_holds_the_live_jobs_once_each_as_they_were() -> None:
    refs, jobs = _refs(3)
    refs[1] = with_out(refs[1], 1)  # (that job was copied back into the head)
    obj, = spill_compaction.merged("q", refs, jobs)
    back = read_spill(obj.data, new_ref(obj, spill_key(DEAD, 500), ETAG))
    gone = jobs[1][1].seq
    assert sorted(job.seq for job in back) == [s for s in range(1, 10) if s != gone]
    for job in back:
        assert job.errors == (ErrorEntry(1, T0, f"boom {job.seq}"),)
        assert (job.attempts, job.max_attempts) == (1, 1)


def test_merged_refuses_jobs_that_do_not_match_the_refs() -> None:
    refs, jobs = _refs(2)
    with pytest.raises(ValueError, match="do not match"):
        spill_compaction.merged("q", refs, jobs[:1])
    with pytest.raises(ValueError, match="do not match"):
        spill_compaction.merged("q", [redriven(refs[0], T0), refs[1]], jobs)


def test_compact_puts_the_merged_refs_in_place_and_drops_the_old_ones() -> None:
    refs, jobs = _refs(4)
    state = _state(refs)
    olds = [refs[1], refs[3]]
    obj, = spill_compaction.merged("q", olds, [jobs[1], jobs[3]])
    new = new_ref(obj, spill_key(DEAD, 600), ETAG)
    spill_compaction.compact(state, olds, [new])
    assert state.spill_refs == [refs[0], new, refs[2]]
    assert state.dropped_refs == olds


def test_compact_of_refs_no_longer_the_heads_changes_nothing() -> None:
    refs, jobs = _refs(3)
    obj, = spill_compaction.merged("q", refs[:2], jobs[:2])
    new = new_ref(obj, spill_key(DEAD, 600), ETAG)
    state = _state([with_out(refs[0], 0), *refs[1:]])  # (a job left it since)
    with pytest.raises(ValueError, match="as they are"):
        spill_compaction.compact(state, refs[:2], [new])
    assert state.spill_refs[1:] == refs[1:] and state.dropped_refs == []
