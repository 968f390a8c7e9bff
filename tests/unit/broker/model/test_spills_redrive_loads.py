"""broker.model.spills.redrive_loads: a redrive by id loads every dead spill
object any of its ids may be in (each once, whatever the ids' order), and
none for a redrive of all (by reference) or for ids no object holds."""

from __future__ import annotations

from broker.model import spills, transitions
from broker.model.format.spill_refs import redriven
from broker.model.job import DEAD, job_id_for
from broker.model.state import MAX_WINDOWS, QueueState
from tests.support.spill_objects import T0, spilled, written


def _state(objects: int, per: int = 3) -> QueueState:
    """A state with ``objects`` dead refs of ``per`` jobs, seqs apart (object i
    holds seqs i*per+1 ..)."""
    state = transitions.new_state(T0)
    jobs = [spilled(seq, attempts=1, max_attempts=1) for seq in range(1, objects * per + 1)]
    state.spill_refs = [ref for _, ref in written(DEAD, jobs, max_jobs=per)]
    return state


def test_a_redrive_by_ids_loads_every_object_one_of_them_is_in() -> None:
    n = MAX_WINDOWS * 3
    state = _state(n)
    ids = [job_id_for(i * 3 + 2) for i in reversed(range(n))]  # (one in each, last first)
    assert spills.redrive_loads(state, ids) == state.spill_refs
    assert spills.redrive_loads(state, [ids[0], ids[0], ids[-1]]) == [
        state.spill_refs[0], state.spill_refs[-1]]


def test_a_redrive_of_all_or_of_ids_no_object_holds_loads_nothing() -> None:
    state = _state(4)
    assert spills.redrive_loads(state, None) == []
    assert spills.redrive_loads(state, [job_id_for(10_000), "nonsense"]) == []
    state.spill_refs[1] = redriven(state.spill_refs[1], T0)  # (pending now: not dead)
    assert spills.redrive_loads(state, [job_id_for(4)]) == []
