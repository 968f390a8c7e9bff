"""What a store holds of a queue's dead jobs, wherever they are (inline in the
head or in the spill objects it references), for the tests of spill objects
through a broker (tests/unit/broker/service/test_spill_writer.py and the
integration tests)."""

from __future__ import annotations

from broker import paths
from broker.model.format.spill_format import SpilledJob, read_checked
from broker.model.format.spill_refs import SpillRef, is_out
from broker.model.job import DEAD, PENDING
from broker.storage import ObjectStore
from tests.support.inprocess import stored


def spill_keys(store: ObjectStore, queue: str = "q") -> list[str]:
    """The keys of every spill object of ``queue`` in the store, sorted."""
    return sorted(store.list(paths.spills_prefix(queue)))


def spilled_jobs(store: ObjectStore, queue: str = "q", kind: str = DEAD) -> list[SpilledJob]:
    """The jobs of the spill objects the landed head references with refs of
    ``kind`` (but those taken ``out``, and a pending ref's before its cursor),
    each object read through the broker's one check (so a missing or changed
    object fails)."""
    out = []
    for ref in stored(store, queue).spill_refs:
        if ref.kind != kind:
            continue
        assert isinstance(ref, SpillRef)
        got = store.read(ref.key)
        jobs = read_checked(ref, got.data, got.etag, store.url, 0, ref.count)
        low = ref.taken if kind == PENDING else 0
        out += [job for pos, job in enumerate(jobs) if pos >= low and not is_out(ref, pos)]
    return out


def spilled_ids(store: ObjectStore, queue: str = "q", kind: str = DEAD) -> list[str]:
    """The ids of :func:`spilled_jobs`, with repeats, sorted."""
    return sorted(job.id for job in spilled_jobs(store, queue, kind))


def dead_everywhere(store: ObjectStore, queue: str = "q") -> list[str]:
    """The ids of ``queue``'s dead jobs, inline and in the landed head's dead
    spill objects, with repeats (a job twice shows twice), sorted."""
    inline = [job.id for job in stored(store, queue).jobs.touched() if job.status == DEAD]
    return sorted(inline + spilled_ids(store, queue))



def held_at_spill_parts(store: ObjectStore, queue: str = "q") -> list[SpilledJob]:
    """The claimed jobs that claim records of the landed head hold at spill
    parts (taken from a pending spill ref: no line in the head, not shown by
    the ref either), unsettled ones, as their objects hold them: each object
    read through the broker's one check (a missing one fails), each job's seq
    the one its record names."""
    state = stored(store, queue)
    refs = {ref.key: ref for ref in state.spill_refs}
    out = []
    for record in state.claim_records.values():
        for pos0, count, key, at0 in record.spills or ():
            ref = refs[key]
            assert isinstance(ref, SpillRef)
            got = store.read(key)
            jobs = read_checked(ref, got.data, got.etag, store.url, 0, ref.count)
            for i in range(count):
                if not record.is_settled(pos0 + i):
                    assert jobs[at0 + i].seq == record.seqs[pos0 + i]
                    out.append(jobs[at0 + i])
    return out
