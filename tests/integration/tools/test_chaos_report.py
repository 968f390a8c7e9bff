"""The chaos runner's verdict (tools/chaos/report.py): every problem a run found fails
it, the runner's own included, and so does a run that did too little work; a run
whose producers crash at start exits non-zero and says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools import chaos
from tools.chaos.checker import FAILURES
from tools.chaos.clients import Recorder
from tools.chaos.report import minimum_work, run_failures

ROOT = Path(__file__).resolve().parents[3]

#: what the crashed producers raise
MESSAGE = "injected: the producer crashed at start"
#: the chaos runner with every single-push producer thread raising as it starts (a bug
#: in the runner's own client code), injected in the runner's process by the test: the
#: runner carries no hook for it
CRASHING = f"""
import sys
from tools.chaos import main
from tools.chaos.clients import Workers

def crash(self, i):
    raise RuntimeError({MESSAGE!r})

Workers.produce = crash
sys.exit(main(sys.argv[1:]))
"""

NO_PROBLEMS: dict[str, list[str]] = {"stuck_threads": [], "client_crashes": [],
                                     "nemesis_crashes": []}
MINIMUM = {"jobs": 100, "push_ok": 1}


def sound_check(acked: int = 500) -> dict[str, Any]:
    """The store check of a run that found nothing wrong."""
    return {**dict.fromkeys(FAILURES, 0), "acked": acked}


def working_recorder() -> Recorder:
    rec = Recorder(lambda: 0.0)
    rec.counts.update({"push_ok": 20, "bulk_push_ok": 2, "publish_ok": 2})
    return rec


SEGMENTS = {"left_behind": 0, "referenced_missing": 0}


def failed(failures: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in failures.items() if v}


def test_a_sound_run_has_no_failure() -> None:
    assert failed(run_failures(sound_check(), SEGMENTS, working_recorder(), NO_PROBLEMS,
                               MINIMUM)) == {}


@pytest.mark.parametrize("name", FAILURES)
def test_every_figure_of_the_store_check_fails_the_run(name: str) -> None:
    check = {**sound_check(), name: 2}
    assert failed(run_failures(check, SEGMENTS, working_recorder(), NO_PROBLEMS,
                               MINIMUM)) == {name: 2}


@pytest.mark.parametrize("name", sorted(NO_PROBLEMS))
def test_every_runner_problem_fails_the_run(name: str) -> None:
    problems = {**NO_PROBLEMS, name: ["producer-0: Traceback ... RuntimeError: boom"]}
    assert failed(run_failures(sound_check(), SEGMENTS, working_recorder(), problems,
                               MINIMUM)) == {name: 1}


def test_answers_no_broker_may_give_fail_the_run() -> None:
    rec = working_recorder()
    rec.anomaly("bulk_push_ids", jobs=300, ids=299)
    rec.claimed_after_complete.append({"job": "j0000000001", "token": "t", "worker": "w1"})
    rec.claim_mismatch += [{"job": "j0000000002", "payload": "0:1",
                            "acked_id": "j0000000001"}] * 2
    assert failed(run_failures(sound_check(), SEGMENTS, rec, NO_PROBLEMS, MINIMUM)) == {
        "anomalies": 1, "claimed_after_ok_complete": 1, "claim_payload_mismatch": 2}


def test_segments_the_sweep_left_or_could_not_list_fail_the_run() -> None:
    rec = working_recorder()
    for segments, want in (({"left_behind": 3, "referenced_missing": 1},
                            {"segments_left_behind": 3, "segments_missing": 1}),
                           ({"left_behind": -1}, {"segments_left_behind": 1})):
        assert failed(run_failures(sound_check(), segments, rec, NO_PROBLEMS,
                                   MINIMUM)) == want
    assert failed(run_failures({**sound_check(), "state_error": "bad"}, SEGMENTS, rec,
                               NO_PROBLEMS, MINIMUM)) == {"state_unreadable": 1}


def test_too_little_work_fails_the_run() -> None:
    rec = working_recorder()
    assert failed(run_failures(sound_check(acked=99), SEGMENTS, rec, NO_PROBLEMS,
                               MINIMUM)) == {"too_little_work": 1}
    minimum = {**MINIMUM, "bulk_push_ok": 1, "publish_ok": 1}
    rec.counts["publish_ok"] = 0
    assert failed(run_failures(sound_check(), SEGMENTS, rec, NO_PROBLEMS,
                               minimum)) == {"too_little_work": 1}


def test_the_minimum_of_work_scales_with_the_run_and_its_producers() -> None:
    def minimum(*argv: str) -> dict[str, int]:
        return minimum_work(chaos.parse_args(list(argv)))

    # (60 + 40 jobs/s) x 60 s x 0.05
    assert minimum() == {"jobs": 300, "push_ok": 1, "bulk_push_ok": 1, "publish_ok": 1}
    assert minimum("--seconds", "600")["jobs"] == 3000
    # the long preset: (20 + 40) x 660 x 0.05
    assert minimum("--preset", "long")["jobs"] == 1980
    assert minimum("--bulk-rate", "0", "--seconds", "4") == {"jobs": 12, "push_ok": 1}
    assert minimum("--publishers", "0") == {"jobs": 300, "push_ok": 1, "bulk_push_ok": 1}
    assert minimum("--min-acked-share", "0")["jobs"] == 1
    with pytest.raises(SystemExit):
        chaos.check_args(chaos.parse_args(["--min-acked-share", "1.5"]))


def run_small(tmp_path: Path, *runner: str) -> tuple[int, dict[str, Any], str]:
    """A few seconds of one broker, one producer and one consumer, no nemesis and no
    bulk work, through ``python *runner``; (exit status, results, output)."""
    out = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run(
        [sys.executable, *runner, "--store", "file", "--seed", "3", "--seconds", "4",
         "--brokers", "1", "--producers", "1", "--consumers", "1", "--kills", "0",
         "--pauses", "0", "--competitors", "0", "--bulk-rate", "0", "--lease-s", "3",
         "--drain-timeout-s", "60", "--max-runtime-s", "150",
         "--run-dir", str(tmp_path / "run"), "--out", str(out)],
        capture_output=True, text=True, timeout=200, env=env, cwd=str(ROOT))
    results = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, results, proc.stdout[-6000:] + proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_whose_producer_crashes_at_start_fails_and_says_why(tmp_path: Path) -> None:
    code, results, output = run_small(tmp_path, "-c", CRASHING)
    assert code == 1, output
    assert results["ok"] is False, output
    failures = results["failures"]
    # no job and no push acknowledged: two minima missed
    assert failures["client_crashes"] == 1 and failures["too_little_work"] == 2, output
    assert "RESULT: FAIL" in output
    assert "RUNNER PROBLEM (client_crashes): producer-0: Traceback" in output
    assert MESSAGE in output
    assert "TOO LITTLE WORK: acknowledged 0 jobs" in output


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_same_small_run_without_the_crash_passes(tmp_path: Path) -> None:
    code, results, output = run_small(tmp_path, "-m", "tools.chaos")
    assert code == 0, output
    assert results["ok"] is True and not failed(results["failures"]), output
    assert results["check"]["acked"] >= results["minimum_work"]["jobs"] == 12, output
    assert "RESULT: PASS no failure" in output
