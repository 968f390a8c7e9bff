"""broker.model.spill_compaction.merged with whole error histories: dead objects
whose jobs carry up to ERRORS_KEPT entries (texts shared between jobs and
objects, empty, MAX_ERROR_CHARS long, escaped) merge into objects whose jobs
read back equal to the originals, histories included (each text re-indexed
in the merged object's own table)."""

from __future__ import annotations

import random

from broker.limits import ERRORS_KEPT, MAX_ERROR_CHARS
from broker.model.format.spill_format import ErrorEntry, SpilledJob, encode_spills, spill_jobs
from broker.model.format.spill_refs import new_ref
from broker.model.job import DEAD
from broker.model.spill_compaction import merged

TEXTS = ["", "a", "x" * MAX_ERROR_CHARS, 'é\n"quoted"', "\u0000 control"]


def _key(n: int) -> str:
    return f"q/spills/d-{n:012d}-abcdabcd.jsonl"


def test_merged_dead_objects_keep_every_job_s_whole_history() -> None:
    rnd = random.Random(5)
    refs, objects, jobs = [], [], []
    seq = 1
    for _ in range(4):
        batch = []
        for _ in range(rnd.randint(1, 30)):
            errors = tuple(ErrorEntry(rnd.randint(1, 1000), rnd.randint(0, 1 << 40),
                                      rnd.choice(TEXTS))
                           for _ in range(rnd.randint(0, ERRORS_KEPT)))
            batch.append(SpilledJob(seq, b'{"s":%d}' % seq, rnd.randint(-5, 5), 1_000, 3, 3,
                                    999, rnd.choice([None, f"k{seq}"]), errors))
            seq += 1
        jobs += batch
        for obj in encode_spills("q", DEAD, batch, max_bytes=6_000):  # (some split)
            refs.append(new_ref(obj, _key(len(refs) + 1), "e"))
            objects.append(obj)
    assert len(objects) > 4
    read = [spill_jobs(obj.data, ref, 0, ref.count) for obj, ref in zip(objects, refs,
                                                                        strict=True)]
    back = []
    for i, obj in enumerate(merged("q", refs, read)):
        ref = new_ref(obj, _key(900 + i), "e")
        back += spill_jobs(obj.data, ref, 0, ref.count)
    assert sorted(back, key=lambda job: job.seq) == jobs
