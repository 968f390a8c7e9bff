"""A short seeded chaos run with job groups (tools/chaos/groups.py): producers push
jobs in 50 skewed groups (single and bulk pushes), the queue is asked for
group_limit 2, consumers log every claim, heartbeat and settlement, a sampler reads
the head, and the run checks the log and the samples against the limit beside the
usual store check. While brokers refuse group settings (before group limits
land) the run must say so and report the limit check "not applicable"; once they
accept them, no group may exceed 2 at any moment.

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
GROUPS = 50
#: The chaos phase (s): 12 in make test, the 20 these runs had before in make long;
#: the same nemesis events, bulk pushes (same_work) and checks in both.
CHAOS_SECONDS = short_and_long("seconds", 12, 20)


def run_groups(tmp_path: Path, seconds: int, *extra: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run(
        [sys.executable, "-m", "tools.chaos", "--store", "file", "--seed", "7",
         "--seconds", str(seconds), "--kills", "2", "--pauses", "0", "--competitors", "0",
         "--lease-s", "3", "--push-rate", "60", "--bulk-rate", same_work(60, seconds, 20),
         "--bulk-min", "200",
         "--bulk-max", "400", "--consumers", "6", "--groups", str(GROUPS),
         "--group-limit", "2", "--drain-timeout-s", "90", "--max-runtime-s", "240",
         "--run-dir", str(tmp_path / "run"), "--out", str(out), *extra],
        capture_output=True, text=True, timeout=280, env=env, cwd=str(ROOT))
    results = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, results, proc.stdout[-6000:] + proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(300)
@CHAOS_SECONDS
def test_groups_chaos_run_logs_claims_and_checks_the_limit(tmp_path: Path, seconds: int) -> None:
    code, results, output = run_groups(tmp_path, seconds)
    assert results, f"no results written:\n{output}"
    check, counts, g = results["check"], results["figures"]["client_counts"], results["groups"]
    for name in ("lost", "duplicated", "unexpected", "superseded", "double"):
        assert check[name] == 0, f"{name}: {check['samples']}\n{output}"
    assert not any(results["runner_problems"].values()), output
    assert results["drain"]["finished"], output
    assert results["figures"]["owner_kills"] >= 1, output
    # groups were pushed, by single and bulk pushes
    assert counts["grouped_jobs_acked"] >= 200, output
    assert counts["grouped_pushes_ok"] > counts["bulk_push_ok"] >= 1, output
    # every claim answer was logged with its group, times, lease and answered expiry
    records = json.loads((tmp_path / "run" / "records.json").read_text())
    log = records["claim_log"]
    assert len(log["claims"]) == counts["jobs_claimed"] == g["claims_logged"], output
    grouped = [c for c in log["claims"] if c["group"] is not None]
    assert len(grouped) == counts["grouped_jobs_claimed"] == g["grouped_claims_logged"] > 0
    assert {c["group"] for c in grouped} <= {f"g{i:05d}" for i in range(GROUPS)}
    assert len({c["group"] for c in grouped}) >= 10, output
    for c in log["claims"]:
        assert c["sent"] <= c["answered"] and c["lease_s"] == 8.0 and c["token"], c
        assert c["expires_at"].endswith("Z"), c
    # ... and every settlement: each ok completion the clients counted is in the log
    ok_completes = [s for s in log["settlements"]
                    if s["outcome"] == "complete" and s["ok"] is True]
    assert len(ok_completes) == counts["complete_ok"], output
    fails = [s for s in log["settlements"] if s["outcome"] == "fail"]
    assert len(fails) >= counts.get("fail_ok", 0) + counts.get("fail_dead", 0) >= 1, output
    # the check ran over the log and the head samples
    assert g["log"]["holds"] == len(grouped) and g["log"]["max_held"] >= 1, output
    assert g["heads"]["samples"] >= 50 and g["heads"]["read_errors"] == 0, output
    # (the samples read the real head's claimed lines and their groups)
    assert g["heads"]["max_claimed"] >= 1, output
    # the brokers' expiries agree with the runner's clock (within their 1 ms rounding)
    assert g["lease_margin_s"]["min"] >= -0.002, output
    assert "--- groups ---" in output
    if g["applied"]:  # brokers with group limits: none exceeded, by either check
        assert g["limit_check"] == "applied", output
        assert g["log"]["max_held"] <= 2 and g["heads"]["max_claimed"] <= 2, \
            f"{g['log']['samples']}\n{g['heads']['violation_samples']}\n{output}"
        assert results["failures"]["group_limit_exceeded"] == 0, output
    else:  # brokers before group limits: said plainly, the check not applicable
        assert "group_limit" in g["settings_refused"], output
        assert "THE BROKER REFUSED THE GROUP SETTINGS" in output
        assert "limit check (not applicable)" in output
        assert g["limit_check"] == "not applicable", output
        assert results["failures"]["group_limit_exceeded"] == 0, output
        # with nothing holding the limit, the check does see groups above it (claims
        # of up to 20 jobs, g00000 about a seventh of them): it reports, not fails
        assert g["log"]["max_held"] > 2 and g["log"]["violations"] > 0, output
    assert code == 0, output


def test_group_options_default_off_and_are_checked() -> None:
    args = chaos.parse_args([])
    assert (args.groups, args.group_limit, args.group_order) == (0, None, None)
    assert args.grouped_segments is False
    acceptance = chaos.parse_args(["--preset", "groups"])
    assert (acceptance.groups, acceptance.group_limit, acceptance.consumers) == (1000, 2, 16)
    assert acceptance.kills >= 10 and acceptance.bar_kills >= 10
    assert acceptance.require_bar and acceptance.bar_acked == 100_000
    fifo = chaos.parse_args(["--preset", "groups-fifo"])
    assert fifo.group_order == "fifo" and fifo.fail_prob > 0 and fifo.groups == 1000
    for bad in (["--group-limit", "2"], ["--groups", "-1"],
                ["--groups", "5", "--group-limit", "-1"], ["--groups", "5", "--group-skew", "0"],
                ["--group-order", "fifo"]):
        with pytest.raises(SystemExit):
            chaos.check_args(chaos.parse_args(bad))
    chaos.check_args(chaos.parse_args(["--groups", "5", "--group-limit", "0"]))


@pytest.mark.slow
@pytest.mark.timeout(300)
@CHAOS_SECONDS
def test_groups_chaos_run_with_grouped_segments(tmp_path: Path, seconds: int) -> None:
    """With --grouped-segments the brokers write grouped bulk pushes into segment
    objects (no publishers: every segment of the run is a grouped push's), and the
    same checks hold: every job once, no group above its limit, nothing left."""
    code, results, output = run_groups(tmp_path, seconds, "--grouped-segments",
                                       "--publishers", "0")
    assert results, f"no results written:\n{output}"
    check, g, seg = results["check"], results["groups"], results["segments"]
    for name in ("lost", "duplicated", "unexpected", "superseded", "double"):
        assert check[name] == 0, f"{name}: {check['samples']}\n{output}"
    assert results["drain"]["finished"] and results["figures"]["owner_kills"] >= 1, output
    # without the flag a grouped push stays in the head: these are grouped segments
    assert seg["segments_written_logged"] >= 1 and seg["objects_seen"] >= 1, output
    assert seg["left_behind"] == 0 and seg["referenced_missing"] == 0, output
    assert g["limit_check"] == "applied", output
    assert g["log"]["max_held"] <= 2 and g["heads"]["max_claimed"] <= 2, output
    assert code == 0, output
