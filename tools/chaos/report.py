"""What a run reports: its figures, the acceptance bar, the result (written as JSON by
``--out``), the raw client records in the run directory, and the printed summary.
All times and durations are in seconds since the run started."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import orjson

from tools.chaos.brokers import BrokerSlot
from tools.chaos.checker import FAILURES
from tools.chaos.clients import Recorder
from tools.chaos.nemesis import Nemesis
from tools.chaos.schedule import Event
from tools.chaos.store import StoreSetup


def acceptance_bar(args: argparse.Namespace, store_kind: str, check: dict[str, Any],
                   owner_kills: int, owner_pauses: int, competitors: int,
                   avail: dict[str, Any], fault_stats: dict[str, Any] | None,
                   bulk_jobs: int = 0, counts: dict[str, int] | None = None
                   ) -> dict[str, list[Any]]:
    """The acceptance figures against ``--bar-*``: name -> [figure, wanted, met]
    (the outage in seconds, the faulted share in %; ``bulk_jobs``: jobs acknowledged
    by bulk pushes and publishes). With the wide load on (``--big-claimers``), also
    what it must have done, from the clients' ``counts``: a claim of
    ``--big-claim-max`` jobs, failures retried at once and later, deaths that all
    ended completed, redrives of all and by id, the owner killed before and after
    a big claim's answer (each as often as ``--redrives`` and ``--claim-kills``
    allow, at least once)."""
    drop_landed = (fault_stats or {}).get("faults", {}).get("drop_landed", 0)
    fault_pct = (fault_stats or {}).get("fault_pct", 0.0)
    max_kill = avail["max_outage_after_owner_kill_s"]
    bar = {
        "acked": [check["acked"], args.bar_acked, check["acked"] >= args.bar_acked],
        "acked_by_bulk_push_or_publish": [bulk_jobs, args.bar_bulk_jobs,
                                          bulk_jobs >= args.bar_bulk_jobs],
        "owner_kills": [owner_kills, args.bar_kills, owner_kills >= args.bar_kills],
        "owner_pauses_past_lease": [owner_pauses, args.bar_pauses,
                                    owner_pauses >= args.bar_pauses],
        "competing_brokers": [competitors, args.bar_competitors,
                              competitors >= args.bar_competitors],
        "max_outage_after_kill_s": [max_kill, args.lease_s + args.bar_outage_extra_s,
                                    max_kill is not None and
                                    max_kill <= args.lease_s + args.bar_outage_extra_s],
    }
    if args.big_claimers > 0:
        n = counts or {}

        def least(name: str, figure: int, wanted: int) -> None:
            bar[name] = [figure, wanted, figure >= wanted]

        least("largest_claim", n.get("big_claim_largest", 0), args.big_claim_max)
        least("fails_retried_at_once_and_later", min(n.get("fail_retry_now", 0),
                                                     n.get("fail_retry_later", 0)), 1)
        bar["died_all_completed"] = [check["died_then_completed"], check["died"],
                                     check["died"] >= 1
                                     and check["died_then_completed"] == check["died"]]
        least("redrives_of_all_and_by_id", min(n.get("redrive_all_ok", 0),
                                               n.get("redrive_ids_ok", 0)),
              min(1, args.redrives // 2))
        least("owner_killed_before_and_after_a_claim",
              int(n.get("claim_kill_before_jobs", 0) > 0
                  and n.get("claim_kill_after_jobs", 0) > 0),
              min(1, args.claim_kills // 2))
    if store_kind != "file":
        bar["fault_pct"] = [round(fault_pct, 3), args.bar_fault_pct,
                            fault_pct >= args.bar_fault_pct]
        bar["dropped_landed_puts"] = [drop_landed, 1, drop_landed >= 1]
    return bar


def bar_met(bar: dict[str, list[Any]]) -> bool:
    """True if every figure of :func:`acceptance_bar` met its bar."""
    return all(v[2] for v in bar.values())


def minimum_work(args: argparse.Namespace) -> dict[str, int]:
    """The least work a run must have acknowledged to count (else it fails, whatever
    its checks found: a run that did next to nothing proves nothing). ``jobs``:
    ``--min-acked-share`` of the jobs the producers were asked to push in the chaos
    phase (``--push-rate`` and ``--bulk-rate`` jobs/s for ``--seconds`` s), at least
    1; and one acknowledged operation of each kind of producer the run has."""
    offered = (args.push_rate + args.bulk_rate) * args.seconds
    out = {"jobs": max(1, math.ceil(args.min_acked_share * offered)), "push_ok": 1}
    if args.bulk_rate > 0:
        if args.bulk_producers > 0:
            out["bulk_push_ok"] = 1
        if args.publishers > 0:
            out["publish_ok"] = 1
    if getattr(args, "groups", 0) > 0:  # grouped jobs pushed and claimed (logged)
        out["grouped_jobs_acked"] = 1
        out["grouped_jobs_claimed"] = 1
    return out


def run_failures(check: dict[str, Any], segments: dict[str, Any], rec: Recorder,
                 problems: dict[str, list[str]], minimum: dict[str, int],
                 groups: dict[str, Any] | None = None) -> dict[str, int]:
    """What fails a run, each a count (the run passes when all are 0 and the drain
    finished): every figure of the store check (:data:`tools.chaos.checker.FAILURES`),
    segment objects left behind or missing, answers no broker may give (anomalies,
    a job claimed again after a complete of it answered ok, a claim answering a
    payload under another id than its push was told), the runner's own problems
    (a client thread or a nemesis action that crashed, a thread stuck at the end:
    the run did not do what it says, so its checks prove less than they claim),
    and too little acknowledged work (``minimum``, see :func:`minimum_work`: the count is
    how many of its minima were missed); with groups, a group above its limit or
    settled out of order (``groups["failures"]``, see
    :func:`tools.chaos.groups.group_checks`: 0 where not applicable)."""
    failures = {name: int(check[name]) for name in FAILURES}
    watched = int(segments["left_behind"])  # what the wait for the sweep saw; -1: unlisted
    failures["segments_left_behind"] = max(failures["segments_left_behind"], abs(watched))
    failures["segments_missing"] = segments.get("referenced_missing", 0)
    failures["anomalies"] = len(rec.anomalies)
    failures["claimed_after_ok_complete"] = len(rec.claimed_after_complete)
    failures["claim_payload_mismatch"] = len(rec.claim_mismatch)
    if "state_error" in check:
        failures["state_unreadable"] = 1
    for name, found in problems.items():
        failures[name] = len(found)
    done = {"jobs": check["acked"], **{k: rec.counts.get(k, 0) for k in minimum if k != "jobs"}}
    failures["too_little_work"] = sum(1 for k, least in minimum.items() if done[k] < least)
    if groups is not None:
        failures.update(groups["failures"])
    return failures


def build_result(args: argparse.Namespace, *, store: StoreSetup, slots: list[BrokerSlot],
                 competitor: BrokerSlot, schedule: list[Event], nemesis: Nemesis,
                 rec: Recorder, check: dict[str, Any], drained: dict[str, Any],
                 fault_stats: dict[str, Any] | None, avail: dict[str, Any],
                 timeline_s: dict[str, float], stuck: list[str], client_crashes: list[str],
                 run_dir: Path, segments: dict[str, Any],
                 groups: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything a run found, as written by ``--out``; ``ok``: no failure (see
    :func:`run_failures`) and the drain finished. Marks ``drained`` unfinished when
    the check found acknowledged jobs still pending or claimed."""
    owner_kills = sum(1 for k in nemesis.kills if k["owner"])
    owner_pauses = sum(1 for p in nemesis.pauses if p["owner"])
    competitors = sum(1 for c in nemesis.competes if c["started"])
    problems = {"stuck_threads": stuck, "client_crashes": client_crashes,
                "nemesis_crashes": nemesis.crashes}
    minimum = minimum_work(args)
    failures = run_failures(check, segments, rec, problems, minimum, groups)
    drained["acked_unfinished_at_check"] = check["acked_unfinished"]
    if check["acked_unfinished"]:
        drained["finished"] = False
    ok = not any(failures.values()) and drained["finished"]
    bulk_jobs = rec.counts["jobs_acked_by_bulk_push"] + check["acked_by_publish"]
    bar = acceptance_bar(args, store.kind, check, owner_kills, owner_pauses, competitors,
                         avail, fault_stats, bulk_jobs, dict(rec.counts))
    starts = {s.name: {"starts": s.starts, "start_failures": s.start_failures}
              for s in [*slots, competitor]}
    return {
        "ok": ok,
        "failures": failures,
        "config": vars(args),
        "store": {"kind": store.kind, "broker_url": store.broker_url,
                  "direct_url": store.direct_url},
        "brokers": {s.name: s.url for s in [*slots, competitor]},
        "timeline_s": timeline_s,
        "schedule": [vars(e) for e in schedule],
        "nemesis_log": nemesis.log,
        "figures": {
            "acked_jobs": check["acked"],
            "owner_kills": owner_kills,
            "kills_total": len(nemesis.kills),
            "owner_pauses_past_lease": owner_pauses,
            "pauses_total": len(nemesis.pauses),
            "competing_brokers": competitors,
            "broker_start_failures": sum(len(s.start_failures)
                                         for s in [*slots, competitor]),
            "client_counts": dict(rec.counts),
            "client_errors": dict(rec.errors),
            "client_error_samples": rec.error_samples,
            "claimed_after_ok_complete": len(rec.claimed_after_complete),
            "claim_payload_mismatch": len(rec.claim_mismatch),
        },
        "faults": fault_stats,
        "availability": avail,
        "drain": drained,
        "check": check,
        "segments": segments,
        "anomalies": rec.anomalies[:50],
        "groups": groups,
        "bar": bar,
        "broker_starts": starts,
        "runner_problems": problems,
        "minimum_work": minimum,
        "run_dir": str(run_dir),
    }


def write_result(path: Path, result: dict[str, Any]) -> None:
    """The result as indented JSON (``--out``), with the command, the machine and its
    load (as every file under bench/results records them)."""
    # imported here: the helpers live with the benchmarks, which tests never import
    from bench._common import LOAD_AT_START, command, load, machine

    result = {"command": command().replace(".venv/bin/python tools/chaos/__main__.py",
                                           ".venv/bin/python -m tools.chaos"),
              "machine": machine(), "load": {"at_start": LOAD_AT_START, "at_end": load()},
              **result}
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2, default=str))

def write_records(run_dir: Path, rec: Recorder) -> None:
    """The raw client records, for post-mortems (in the run directory)."""
    with open(run_dir / "records.json", "wb") as f:
        f.write(orjson.dumps({
            "acked": rec.acked, "acked_t": rec.acked_t, "attempted": sorted(rec.attempted),
            "acked_published": sorted(rec.acked_published), "anomalies": rec.anomalies,
            "claims": rec.claims,
            "completions": [vars(c) for c in rec.completions],
            "complete_unknown": rec.complete_unknown,
            "push_failures": rec.push_failures,
            "claimed_after_complete": rec.claimed_after_complete,
            "claim_mismatch": rec.claim_mismatch[:1000],
            # the log of claims, ok heartbeats and settlements (tools/chaos/groups.py)
            "claim_log": rec.log.as_json(), "wall_at_zero": rec.log.wall_at_zero,
        }))


def print_summary(r: dict[str, Any]) -> None:
    """Print the run's figures, the store check, the bar and the verdict, from the
    result of :func:`build_result` (times in seconds)."""
    c, f, a, sg = r["check"], r["figures"], r["availability"], r["segments"]
    counts = f["client_counts"]
    lines = [
        "",
        f"=== chaos run: store={r['store']['kind']} seed={r['config']['seed']} "
        f"seconds={r['config']['seconds']} brokers={r['config']['brokers']} "
        f"lease={r['config']['lease_s']}s ===",
        f"jobs acknowledged      {c['acked']}  (attempted, not acknowledged: "
        f"{c['attempted_not_acked']})",
        f"  of which by reference  {counts.get('jobs_acked_by_bulk_push', 0)} in "
        f"{counts.get('bulk_push_ok', 0)} bulk pushes, {c['acked_by_publish']} in "
        f"{counts.get('publish_ok', 0)} publishes ({counts.get('publish_duplicate_answers', 0)}"
        f" answered duplicate, {counts.get('publish_replays', 0)} replays, "
        f"{counts.get('publish_aborted', 0)} aborted)",
        f"completions ok/stale/unknown  {f['client_counts'].get('complete_ok', 0)} / "
        f"{f['client_counts'].get('complete_stale', 0)} / "
        f"{f['client_counts'].get('complete_unknown', 0)}",
        f"wide load              big claims {counts.get('big_claims', 0)} of "
        f"{counts.get('big_claim_jobs', 0)} jobs (largest {counts.get('big_claim_largest', 0)}"
        f", {counts.get('claims_of_1000_or_more', 0)} of 1,000 or more), heartbeats "
        f"{counts.get('heartbeats', 0)} (jobs stale {counts.get('heartbeat_jobs_stale', 0)}); "
        f"fails retried at once {counts.get('fail_retry_now', 0)}, later "
        f"{counts.get('fail_retry_later', 0)}, dead {counts.get('fail_dead', 0)}; redrives "
        f"of all {counts.get('redrive_all_ok', 0)}, by id {counts.get('redrive_ids_ok', 0)} "
        f"({counts.get('jobs_redriven', 0)} jobs), in the drain {r['drain'].get('redrives', 0)};"
        f" owner killed around a big claim: before its answer "
        f"{counts.get('claim_kill_before', 0)}, after {counts.get('claim_kill_after', 0)} "
        f"({counts.get('claim_kill_jobs', 0)} jobs)",
        f"died / then completed  {c['died']} / {c['died_then_completed']}  (redriven by id "
        f"{c['redriven_by_id']}, then completed {c['redriven_by_id_then_completed']})",
        f"owner kills            {f['owner_kills']}  (kills in all {f['kills_total']})",
        f"pauses past the lease  {f['owner_pauses_past_lease']}  (in all "
        f"{f['pauses_total']})",
        f"competing brokers      {f['competing_brokers']}",
        f"broker start failures  {f['broker_start_failures']}",
    ]
    if r["faults"]:
        fs = r["faults"]
        lines.append(f"storage requests       {fs.get('requests')}  faulted "
                     f"{fs.get('faulted')} ({fs.get('fault_pct', 0):.2f}%): "
                     + ", ".join(f"{k} {v}" for k, v in (fs.get("faults") or {}).items()))
    kill_list = ", ".join(f"{k['outage_s']}" for k in a["kill_outages"])
    pause_list = ", ".join(f"{p['outage_s']}" for p in a["pause_outages"])
    lines += [
        f"longest window without progress  {a['longest_gap_s']}s "
        f"(at t={a['longest_gap_at_s']}s)",
        f"outage after owner kill: max {a['max_outage_after_owner_kill_s']}s; each: "
        f"[{kill_list}]",
        f"outage after pause: [{pause_list}]",
        f"drain                  {'finished' if r['drain']['finished'] else 'NOT FINISHED'}"
        f" in {r['drain']['seconds']}s; left {r['drain']['left']}",
        f"client errors          {sum(f['client_errors'].values())}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(f["client_errors"].items())),
        "--- store check ---",
        f"lost {c['lost']}  duplicated {c['duplicated']}  unexpected {c['unexpected']} "
        f"{c['unexpected_detail']}  superseded {c['superseded']} {c['superseded_detail']}  "
        f"double {c['double']} (raw lines: {c['double_raw_lines']})",
        f"segments left behind {sg['left_behind']}  (objects at the end "
        f"{sg.get('objects')}, referenced {sg.get('referenced')}, referenced but missing "
        f"{sg.get('referenced_missing')}; seen during the run {sg.get('objects_seen')}, "
        f"written by pushes that reached their commit (broker logs) "
        f"{sg.get('segments_written_logged')}, swept {sg.get('segments_swept_logged')}"
        + (f", PUTs landed {sg['segment_puts_landed']}, deleted {sg['segment_deletes']}"
           if "segment_puts_landed" in sg else "")
        + f"; waited {sg.get('waited_s')}s for the sweep)",
        f"job objects left once drained {c['objects_left_once_drained']}, claim records "
        f"left {c['claim_records_left']}",
        f"archived-and-still-queued {c['archived_and_queued']}, stale answers for "
        f"completions that landed {c['stale_answer_but_landed']}, claims of jobs already "
        f"completed ok {f['claimed_after_ok_complete']}, claims answering a payload under "
        f"another id {f['claim_payload_mismatch']}, ack conflicts {c['ack_conflicts']}, "
        f"ids acknowledged for two payloads {c['ids_acked_twice']}",
        f"also: archive objects "
        f"{c['archive_objects']} ({c['archive_lines']} lines, "
        f"{c['archive_lines_read']} as read), left in queue {c['queue_jobs_left']}",
    ]
    if "state_error" in c:
        lines.append(f"QUEUE OBJECT UNREADABLE: {c['state_error']}")
    if r.get("groups"):
        lines += group_lines(r["groups"], counts)
    lines.append("--- bar (figure, wanted, met) ---")
    for name, (value, want, met) in r["bar"].items():
        lines.append(f"{name:28s} {value!s:>10} {want!s:>10} {'yes' if met else 'NO'}")
    problems = r["runner_problems"]
    for name, found in problems.items():
        for text in found:
            lines.append(f"RUNNER PROBLEM ({name}): {text.strip()}")
    if r["failures"].get("too_little_work"):
        lines.append(f"TOO LITTLE WORK: acknowledged {c['acked']} jobs and "
                     f"{ {k: counts.get(k, 0) for k in r['minimum_work'] if k != 'jobs'} }"
                     f"; a run of this length needs at least {r['minimum_work']}")
    failed = {k: v for k, v in r["failures"].items() if v}
    lines.append(f"RESULT: {'PASS' if r['ok'] else 'FAIL'} "
                 + (f"failed: {failed}" if failed else "no failure")
                 + ("" if r["drain"]["finished"] else " (drain not finished)"))
    print("\n".join(lines), flush=True)


def group_lines(g: dict[str, Any], counts: dict[str, int]) -> list[str]:
    """The summary's lines about groups (see :func:`tools.chaos.groups.group_checks`)."""
    log, heads, order = g["log"], g["heads"] or {}, g["order_by_log"]
    out = ["--- groups ---",
           f"settings               limit {g['limit']}, order {g['order']}: "
           + ("applied" if g["applied"] else "NOT APPLIED"
              + (f" (the broker refused them: {g['settings_refused']})"
                 if g.get("settings_refused") else " (none asked for)")),
           f"grouped jobs           acknowledged {counts.get('grouped_jobs_acked', 0)}, "
           f"claimed {counts.get('grouped_jobs_claimed', 0)}; log: {g['claims_logged']} "
           f"claims, {g['heartbeats_logged']} ok heartbeats, {g['settlements_logged']} "
           f"settlements; lease margin {g['lease_margin_s']}s",
           f"limit check ({g['limit_check']})  from the log: {log['holds']} holds in "
           f"{log['groups']} groups ({log['ended_by_lease']} ended by their lease), most "
           f"held at once {log['max_held']}, moments above the limit {log['violations']}; "
           f"head samples: {heads.get('samples', 0)}, most claimed at once "
           f"{heads.get('max_claimed', 0)}, above the limit {heads.get('violations', 0)}, "
           f"positions not attributed {heads.get('unattributed_positions_max', 0)}",
           f"order check ({g['order_check']})  {order['completed']} completions, "
           f"{order['completion_violations']} out of push order; {order['claimed']} first "
           f"claims, {order['claim_violations']} out of order; dead left out "
           f"{order['died_left_out']}"]
    limits_on, order_on = g["limit_check"] == "applied", g["order_check"] == "applied"
    for name, on, found in (
            ("above the limit (log)", limits_on, log["samples"]),
            ("above the limit (head)", limits_on, heads.get("violation_samples", [])),
            ("settled out of order", order_on, order["completion_samples"]),
            ("claimed out of order", order_on, order["claim_samples"])):
        for v in found[:5] if on else []:
            out.append(f"GROUP VIOLATION, {name}: {v}")
    return out
