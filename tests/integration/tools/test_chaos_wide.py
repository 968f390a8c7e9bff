"""A short seeded chaos run with the load of wide queues (tools/chaos/wide.py): big
claims heartbeated while held, failures retried at once and later, jobs that fail
until they die, redrives of the dead (all and by id) with the owner killed or paused
while they run, and the owner killed around claims of thousands of jobs. The run
must pass its store check, and its report must show that each of those happened.

Timing-dependent by nature, as the runs of test_chaos.py: a failure is a finding
about the broker; the message carries the runner's summary and the run directory
stays under pytest's tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.tiers import same_work, short_and_long
from tools import chaos

ROOT = Path(__file__).resolve().parents[3]
#: The chaos phase (s): 14 in make test, the 20 this run had before in make long;
#: the same nemesis events, bulk pushes (same_work) and checks in both.
CHAOS_SECONDS = short_and_long("seconds", 14, 20)


def run_wide(tmp_path: Path, store: str, seconds: int,
             *extra: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run(
        [sys.executable, "-m", "tools.chaos", "--store", store, "--seed", "5",
         "--seconds", str(seconds), "--kills", "1", "--pauses", "0", "--competitors", "0",
         "--redrives", "2", "--claim-kills", "2", "--lease-s", "3",
         "--push-rate", "20", "--bulk-rate", same_work(150, seconds, 20),
         "--bulk-min", "500", "--bulk-max", "2000",
         "--max-backlog", "8000", "--big-claimers", "2", "--big-claim-min", "500",
         "--big-claim-max", "2000", "--doom-every", "13", "--max-attempts", "3",
         "--drain-timeout-s", "90", "--max-runtime-s", "240",
         "--run-dir", str(tmp_path / "run"), "--out", str(out), *extra],
        capture_output=True, text=True, timeout=280, env=env, cwd=str(ROOT))
    results = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, results, proc.stdout[-6000:] + proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(300)
@CHAOS_SECONDS
def test_wide_chaos_run_on_file_store(tmp_path: Path, seconds: int) -> None:
    code, results, output = run_wide(tmp_path, "file", seconds)
    assert results, f"no results written:\n{output}"
    check, counts = results["check"], results["figures"]["client_counts"]
    for name in ("lost", "duplicated", "unexpected", "superseded", "double",
                 "objects_left_once_drained", "claim_records_left", "segments_left_behind"):
        assert check[name] == 0, f"{name}: {check['samples']}\n{output}"
    assert not any(results["runner_problems"].values()), output
    assert results["drain"]["finished"] and check["acked_unfinished"] == 0, output
    # big claims, held and heartbeated
    assert counts["big_claims"] >= 1 and counts["claims_of_1000_or_more"] >= 1, output
    assert counts["heartbeats"] >= 1 and counts["heartbeat_jobs_ok"] >= 1, output
    # failures retried at once and later, and deaths
    assert counts["fail_retry_now"] >= 1 and counts["fail_retry_later"] >= 1, output
    assert counts["fail_dead"] >= 1 and check["died"] >= 1, output
    # every job that died ended completed, once (the drain redrove what was left)
    assert check["died_then_completed"] == check["died"], f"{check['samples']}\n{output}"
    # redrives of all and by id, each with the owner killed or paused while it ran
    assert counts["redrive_all_ok"] >= 1 and counts["redrive_ids_ok"] >= 1, output
    assert check["redriven_by_id_then_completed"] == check["redriven_by_id"] >= 1, output
    redrives = [e for e in results["nemesis_log"] if e["action"] == "redrive"]
    assert sorted(e["mode"] for e in redrives) == ["all", "ids"], output
    # the owner killed around a claim of thousands: before its answer and after it
    assert counts["claim_kill_before"] == 1 and counts["claim_kill_after"] == 1, output
    # (each waits at most 16 s for the queue to hold --big-claim-max jobs, then pushes
    # the rest itself; a claim retried on the next owner after a "before" kill finds
    # the first attempt's jobs still leased, so these are claims of hundreds at least)
    assert counts["claim_kill_before_jobs"] >= 200, output
    assert counts["claim_kill_after_jobs"] >= 200, output
    assert counts["claim_kill_jobs"] >= 1000, output
    assert results["figures"]["owner_kills"] >= 3, output
    # the bar of the wide load says the same
    bar = results["bar"]
    for name in ("fails_retried_at_once_and_later", "died_all_completed",
                 "redrives_of_all_and_by_id", "owner_killed_before_and_after_a_claim"):
        assert bar[name][2], f"{name}: {bar[name]}\n{output}"
    assert code == 0, output


def test_wide_options_default_off_and_are_checked() -> None:
    args = chaos.parse_args([])
    assert (args.big_claimers, args.redrives, args.claim_kills, args.doom_every) == (0, 0, 0, 0)
    assert args.big_claim_max == 2000
    wide = chaos.parse_args(["--preset", "wide"])
    assert wide.big_claimers > 0 and wide.redrives > 0 and wide.claim_kills > 0
    assert wide.doom_every > 0 and wide.big_claim_max == 2000
    assert chaos.parse_args(["--preset", "wide", "--redrives", "1"]).redrives == 1
    for bad in (["--big-claim-min", "3000"], ["--big-claim-max", "20000"],
                ["--redrives", "-1"], ["--big-fail-prob", "2"], ["--heartbeat-s", "0"]):
        with pytest.raises(SystemExit):
            chaos.check_args(chaos.parse_args(bad))


def test_the_schedule_alternates_redrive_modes_and_claim_kill_moments() -> None:
    args = chaos.parse_args(["--seed", "3", "--seconds", "100", "--kills", "0", "--pauses",
                             "0", "--competitors", "0", "--redrives", "4",
                             "--claim-kills", "4"])
    events = chaos.make_schedule(args)
    redrives = [e.params for e in events if e.kind == "redrive"]
    kills = [e.params for e in events if e.kind == "claim_kill"]
    assert [p["mode"] for p in redrives] == ["all", "ids", "all", "ids"]
    assert all(p["then"] in ("kill", "pause") for p in redrives)
    assert [p["when"] for p in kills] == ["before", "after", "before", "after"]
    assert [vars(e) for e in events] == [vars(e) for e in chaos.make_schedule(args)]
