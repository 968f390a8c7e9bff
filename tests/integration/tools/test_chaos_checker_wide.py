"""The chaos runner's store check (tools/chaos/checker.py) on the paths of wide queues:
jobs that died (and were redriven and completed), job objects left once the queue
is drained, and what a newer head adds (spill objects, claim records), read
generically. Each test starts from a store a real broker wrote while the runner's
Recorder heard what its clients were told (tests/support/chaos_stores.py), breaks
one thing, and checks that exactly the expected figures report it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.storage import store_from_url
from tests.support.chaos_stores import ChaosStore, chaos_store
from tools.chaos.checker import (
    FAILURES,
    check_store,
    claim_records_of,
    object_refs,
    spill_jobs,
)
from tools.chaos.clients import Recorder
from tools.chaos.store import QUEUE, status_counts


@pytest.fixture()
def run(tmp_path: Path) -> ChaosStore:
    t0 = time.monotonic()
    made = chaos_store(tmp_path / "store", Recorder(lambda: time.monotonic() - t0))
    assert failures(check_store(made.store, made.rec)) == {}
    return made


def failures(check: dict[str, Any]) -> dict[str, int]:
    """The non-zero figures a run fails on."""
    return {name: check[name] for name in FAILURES if check[name]}


def recorder(run: ChaosStore) -> Recorder:
    assert isinstance(run.rec, Recorder)
    return run.rec


def test_a_dead_job_left_in_the_queue_is_unfinished_and_deleting_it_loses_it(
        run: ChaosStore) -> None:
    dead = run.die(4)
    recorder(run).died.add(dead)
    check = check_store(run.store, run.rec)
    # still dead at the check: the run's drain (which redrives the dead) did not finish
    assert failures(check) == {}
    assert check["acked_unfinished"] == 1 and check["samples"]["acked_unfinished"] == [dead]
    assert check["queue_jobs_left"] == {"dead": 1}
    assert (check["died"], check["died_then_completed"]) == (1, 0)
    assert check["samples"]["died_not_completed"] == [dead]
    assert status_counts(run.store) == {"dead": 1}
    run.drop_from_head(dead)
    check = check_store(run.store, run.rec)
    assert failures(check) == {"lost": 1}
    [lost] = check["samples"]["lost"]
    assert (lost["id"], lost["payload"], lost["queue_status"]) == (dead, "0:4", None)


def test_a_dead_job_redriven_and_completed_is_accounted_once(run: ChaosStore) -> None:
    dead = run.die(4)
    rec = recorder(run)
    rec.died.add(dead)
    rec.redriven.add(dead)
    run.redrive_and_complete(dead)
    check = check_store(run.store, run.rec)
    assert failures(check) == {}
    assert check["acked"] == 5 and check["acked_unfinished"] == 0
    assert (check["died"], check["died_then_completed"], check["redriven_by_id"],
            check["redriven_by_id_then_completed"]) == (1, 1, 1, 1)
    assert check["objects_left_once_drained"] == 0 and check["claim_records_left"] == 0


def test_a_redriven_job_archived_twice_is_double(run: ChaosStore) -> None:
    dead = run.die(4)
    recorder(run).died.add(dead)
    run.redrive_and_complete(dead)
    key, records = run.archived(dead)
    copy = key.rsplit("/", 1)[0] + "/999999999999-c-0123456789abcdef01234567.jsonl"
    run.rewrite_archive(copy, [r for r in records if r["id"] == dead])
    check = check_store(run.store, run.rec)
    assert failures(check) == {"double": 1}
    assert list(check["samples"]["double"]) == [dead]


def test_a_redriven_job_pushed_again_under_a_new_id_is_duplicated(run: ChaosStore) -> None:
    dead = run.die(4)
    run.redrive_and_complete(dead)
    again = run.push_unrecorded({"p": 0, "n": 4})  # the same payload, a second job
    check = check_store(run.store, run.rec)
    assert failures(check) == {"duplicated": 1, "unexpected": 1}
    assert check["samples"]["duplicated"] == {"0:4": sorted([dead, again])}
    assert check["samples"]["wrong_id"] == [{"payload": "0:4", "acked_ids": [dead],
                                             "jobs": sorted([dead, again])}]


def test_a_spill_object_left_once_drained_fails(run: ChaosStore) -> None:
    key = run.leave_spill()
    check = check_store(run.store, run.rec)
    # not referenced (left behind) and, the queue being drained, left at all
    assert failures(check) == {"segments_left_behind": 1, "objects_left_once_drained": 1}
    assert check["samples"]["segments_left_behind"] == [key]
    assert check["samples"]["objects_left_once_drained"] == [key]


def test_a_segment_left_once_drained_counts_as_a_job_object_left(run: ChaosStore) -> None:
    key = run.leave_segment()
    check = check_store(run.store, run.rec)
    assert failures(check) == {"segments_left_behind": 1, "objects_left_once_drained": 1}
    assert check["samples"]["objects_left_once_drained"] == [key]


def test_spill_objects_and_claim_records_are_read_from_the_head_generically(
        tmp_path: Path) -> None:
    """What a version-5 head adds, read as plain JSON: the jobs of the spill objects
    it references (any line with an id; the status the object's kind where the line
    has none), and its claim records."""
    store = store_from_url(f"file://{tmp_path}")
    dead = paths.spill_key(QUEUE, paths.spill_name("dead", 7, "0000aaaa"))
    pending = paths.spill_key(QUEUE, paths.spill_name("pending", 8, "0000bbbb"))
    store.create_if_absent(dead, b'{"spill":"header"}\n{"id":"j0000000003","payload":'
                                 b'{"p":0,"n":3},"attempts":3}\nnot json\n')
    store.create_if_absent(pending, b'{"id":"j0000000004","status":"pending"}\n'
                                    b'{"id":"j0000000003"}\n')
    raw = {"version": 5, "spills": [{"key": dead}, {"key": pending}],
           "segments": [{"key": "chaos/segments/seg-x"}],
           "claims": [{"worker": "w0", "base": 1, "count": 2000}]}
    again: list[str] = []
    jobs = spill_jobs(store, raw, again)
    assert sorted(jobs) == ["j0000000003", "j0000000004"]
    assert jobs["j0000000004"]["status"] == "pending"
    assert again == ["j0000000003"]  # held by both objects
    assert spill_jobs(store, {**raw, "spills": [{"key": dead}]})["j0000000003"][
        "status"] == "dead"
    assert object_refs(raw) == {dead, pending, "chaos/segments/seg-x"}
    assert claim_records_of(raw) == raw["claims"]
    assert claim_records_of({"version": 4}) == [] and claim_records_of(None) == []
    # the drain's counts see both too
    store.create_if_absent(paths.state_key(QUEUE), orjson.dumps(
        {"jobs": [], "spills": [{"key": dead, "count": 2, "taken": 0}],
         "claims": raw["claims"]}))
    assert status_counts(store) == {"dead": 2, "claim_records": 1}
