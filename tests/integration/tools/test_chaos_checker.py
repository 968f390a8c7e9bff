"""The chaos runner's store check (tools/chaos/checker.py, ``check_store``) finds each
kind of broken store it exists for, and names the job (or object) at fault.

Each test starts from a store a real broker wrote while the runner's own Recorder
heard what its clients were told (tests/support/chaos_stores.py), checks that the
store passes, breaks one thing, and checks that exactly the expected figures
report it. A checker that answered zeros fails every test but the first.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker import paths
from tests.support import chaos_stores
from tests.support.chaos_stores import ChaosStore, chaos_store
from tools.chaos.checker import FAILURES, check_store
from tools.chaos.clients import Recorder
from tools.chaos.store import QUEUE


@pytest.fixture()
def run(tmp_path: Path) -> ChaosStore:
    t0 = time.monotonic()
    made = chaos_store(tmp_path / "store", Recorder(lambda: time.monotonic() - t0))
    healthy = check_store(made.store, made.rec)
    assert failures(healthy) == {}, healthy["samples"]
    return made


def failures(check: dict[str, Any]) -> dict[str, int]:
    """The non-zero figures a run fails on."""
    return {name: check[name] for name in FAILURES if check[name]}


def test_the_stores_queue_is_the_runners() -> None:
    assert chaos_stores.QUEUE == QUEUE


def test_a_healthy_store_has_no_failure(run: ChaosStore) -> None:
    check = check_store(run.store, run.rec)
    assert failures(check) == {}
    assert (check["acked"], check["archive_lines"], check["archive_lines_read"]) == (4, 4, 4)
    assert check["acked_unfinished"] == 0 and check["queue_jobs_left"] == {}


def test_an_acknowledged_job_missing_from_the_store_is_lost(run: ChaosStore) -> None:
    gone = run.ids[1]
    key, records = run.archived(gone)
    run.rewrite_archive(key, [r for r in records if r["id"] != gone])
    check = check_store(run.store, run.rec)
    # its ok complete now has no record either: superseded, the job vanished
    assert failures(check) == {"lost": 1, "superseded": 1}
    [lost] = check["samples"]["lost"]
    assert (lost["id"], lost["payload"]) == (gone, "0:1")
    assert [c["job"] for c in check["samples"]["superseded"]["vanished"]] == [gone]


def test_a_published_payload_missing_from_the_store_is_lost(run: ChaosStore) -> None:
    run.rec.published(["200:0"], run.rec.clock(), duplicate=False)
    check = check_store(run.store, run.rec)
    assert failures(check) == {"lost": 1}
    assert [(x["payload"], x["published"]) for x in check["samples"]["lost"]] == [
        ("200:0", True)]


def test_a_job_archived_twice_is_double(run: ChaosStore) -> None:
    twice = run.ids[2]
    key, records = run.archived(twice)
    copy = key.rsplit("/", 1)[0] + "/999999999999-c-0123456789abcdef01234567.jsonl"
    run.rewrite_archive(copy, [r for r in records if r["id"] == twice])
    check = check_store(run.store, run.rec)
    assert failures(check) == {"double": 1}
    assert list(check["samples"]["double"]) == [twice]
    assert sorted(check["samples"]["double"][twice]["archive_objects"]) == sorted([key, copy])


def test_a_job_in_both_the_archive_and_the_head_is_archived_and_queued(
        run: ChaosStore) -> None:
    last = run.ids[-1]
    run.roll_back_head(run.heads[last])  # the head from before its complete: claimed
    check = check_store(run.store, run.rec)
    # (claimed: so its claim record is in the head as well)
    assert failures(check) == {"archived_and_queued": 1, "claim_records_left": 1}
    assert check["samples"]["archived_and_queued"] == [last]
    assert check["queue_jobs_left"]["claimed"] == 1


def test_a_job_nobody_pushed_is_unexpected(run: ChaosStore) -> None:
    stray = run.push_unrecorded({"p": 0, "n": 99})
    foreign = run.push_unrecorded({"not": "ours"})
    check = check_store(run.store, run.rec)
    assert failures(check) == {"unexpected": 2}
    assert check["unexpected_detail"] == {"foreign_payload": 1, "never_pushed": 1,
                                          "wrong_id": 0}
    assert check["samples"]["never_pushed"] == [{"payload": "0:99", "jobs": [stray]}]
    assert [f["job"] for f in check["samples"]["foreign_payload"]] == [foreign]


def test_a_complete_answered_ok_for_a_token_the_archive_does_not_hold_is_superseded(
        run: ChaosStore) -> None:
    job = run.ids[0]
    key, records = run.archived(job)
    # another worker's complete with another token is what landed
    run.rewrite_archive(key, [{**r, "worker": "w9", "token": "t-other",
                               "result": {"by": "w9", "token": "t-other"}}
                              if r["id"] == job else r for r in records])
    check = check_store(run.store, run.rec)
    assert failures(check) == {"superseded": 1}
    [other] = check["samples"]["superseded"]["other_token"]
    assert (other["job"], other["worker"]) == (job, "w0")
    assert other["recorded"][0]["worker"] == "w9"


def test_a_stale_answer_for_a_complete_that_landed_is_counted(run: ChaosStore) -> None:
    job = run.ids[3]
    token = run.tokens[job]
    # the worker's retry of its complete was answered stale, yet the first landed
    run.rec.completed([(token, job)], [SimpleNamespace(ok=False, reason="stale")], "w0",
                      run.rec.clock())
    check = check_store(run.store, run.rec)
    assert failures(check) == {"stale_answer_but_landed": 1}
    assert check["samples"]["stale_answer_but_landed"] == [
        {"job": job, "token": token, "reason": "stale"}]


def test_one_id_acknowledged_for_two_pushes_is_counted_and_the_second_payload_lost(
        run: ChaosStore) -> None:
    reused = run.ids[1]
    run.rec.pushed(["0:77"], [reused], run.rec.clock())
    check = check_store(run.store, run.rec)
    assert failures(check) == {"ids_acked_twice": 1, "lost": 1}
    assert check["samples"]["ids_acked_twice"] == {reused: ["0:1", "0:77"]}
    assert [(x["id"], x["payload"]) for x in check["samples"]["lost"]] == [(reused, "0:77")]


def test_an_ack_conflict_fails_and_every_id_it_gave_is_checked(run: ChaosStore) -> None:
    """A payload answered a ghost id first and its real id later: the first id
    stays recorded and is found lost (it used to be overwritten by the second)."""
    rec = Recorder(run.rec.clock)
    ghost = "j0000009999"
    rec.pushed(["0:0"], [ghost], 0.0)
    rec.pushed([f"0:{n}" for n in range(len(run.ids))], list(run.ids), 0.0)
    assert rec.acked["0:0"] == ghost
    check = check_store(run.store, rec)
    assert failures(check) == {"ack_conflicts": 1, "lost": 1}
    assert check["samples"]["ack_conflicts"] == [
        {"payload": "0:0", "first": ghost, "again": run.ids[0]}]
    assert [(x["id"], x["payload"]) for x in check["samples"]["lost"]] == [(ghost, "0:0")]


def test_a_segment_object_no_head_references_is_left_behind(run: ChaosStore) -> None:
    key = run.leave_segment()
    assert key.startswith(paths.segments_prefix(QUEUE))
    check = check_store(run.store, run.rec)
    assert failures(check) == {"segments_left_behind": 1, "objects_left_once_drained": 1}
    assert check["samples"]["segments_left_behind"] == [key]
