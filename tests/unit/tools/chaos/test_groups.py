"""tools/chaos/groups.py: the chaos runner's checks of job groups, on logs written
through its ClaimLog as the runner's clients write them (claims, heartbeats answered
ok, completes and fails with their answers): a group above its limit is caught with
the moment and the jobs; a hold ended by its lease and then reclaimed is not one; a
fifo group settled out of push order is caught; clean logs pass; head samples count
what the owner counts. Times are seconds since the run started."""

from __future__ import annotations

import random
from typing import Any

import pytest

from broker import timefmt
from broker.model.job import job_id_for
from broker.wire import ItemResult
from osqueue_spark.bodies import ClaimedJob
from tools.chaos.groups import (
    ClaimLog,
    HeadSamples,
    check_group_limits,
    check_group_order,
    group_checks,
    group_of,
    head_claimed_by_group,
    held_intervals,
    lease_margins,
)

WALL0 = 1_800_000_000.0  # the wall clock at the run's time 0, s
LEASE = 8.0


def job(seq: int, token: str, group: str | None = "g1", sent: float = 0.0,
        lease_s: float = LEASE) -> ClaimedJob:
    """A claimed job as a claim answers it: its expiry ``lease_s`` s after receipt,
    5 ms after ``sent``."""
    expires = timefmt.fmt(round((WALL0 + sent + lease_s) * 1000) + 5)
    return ClaimedJob(job_id_for(seq), {"n": seq}, token, 1, expires, group)


class Log:
    """A ClaimLog driven the way the runner's clients drive it."""

    def __init__(self) -> None:
        self.log = ClaimLog(WALL0)

    def claim(self, seq: int, token: str, at: float, group: str | None = "g1",
              worker: str = "w0") -> None:
        self.log.claimed([job(seq, token, group, at)], worker, at, at + 0.01, LEASE)

    def complete(self, token: str, at: float, ok: bool = True) -> None:
        self.log.settled("complete", [token], at, at + 0.01, [ItemResult(token, ok)])

    def fail(self, token: str, at: float, status: str = "pending") -> None:
        self.log.settled("fail", [token], at, at + 0.01, [ItemResult(token, True, None, status)])

    def heartbeat(self, token: str, at: float, ok: bool = True) -> None:
        self.log.heartbeat([token], [ok], at, LEASE)

    def json(self) -> dict[str, list[dict[str, Any]]]:
        return self.log.as_json()


def limits(log: Log, limit: int | None) -> dict[str, Any]:
    return check_group_limits(held_intervals(log.json()), limit)


def test_three_overlapping_holds_of_a_group_at_limit_2_are_caught_with_moment_and_jobs() -> None:
    log = Log()
    log.claim(1, "t1", 0.0)
    log.claim(2, "t2", 1.0)
    log.claim(3, "t3", 2.0)  # while t1 and t2 still hold theirs
    log.claim(4, "t4", 2.5, group="g2")  # another group: not counted with g1
    for token, at in (("t1", 3.0), ("t2", 3.1), ("t3", 3.2), ("t4", 3.3)):
        log.complete(token, at)
    out = limits(log, 2)
    assert out["violations"] == 1 and out["max_held"] == 3
    [v] = out["samples"]
    assert v["group"] == "g1" and v["limit"] == 2 and v["t"] == 2.01
    assert [h.split("@")[0] for h in v["held"]] == [job_id_for(1), job_id_for(2),
                                                    job_id_for(3)]
    assert limits(log, 3)["violations"] == 0


def test_a_hold_ended_by_its_lease_then_reclaimed_is_not_a_violation() -> None:
    log = Log()
    log.claim(1, "t1", 0.0)      # its worker dies: held until 0 + 8 s at least
    log.claim(2, "t2", 1.0)      # held throughout (heartbeated)
    log.heartbeat("t2", 6.0)
    log.claim(1, "t3", 8.5)      # job 1 reclaimed after its lease ran out
    log.complete("t1", 9.0, ok=False)  # the dead worker's late complete: stale
    log.complete("t2", 12.0)
    log.complete("t3", 12.5)
    holds = {h.token: h for h in held_intervals(log.json())}
    assert (holds["t1"].end, holds["t1"].ended_by) == (8.0, "lease")
    assert (holds["t2"].end, holds["t2"].ended_by) == (12.0, "settled")
    out = limits(log, 2)
    assert out["violations"] == 0 and out["max_held"] == 2 and out["ended_by_lease"] == 1


def test_a_heartbeat_answered_ok_keeps_the_hold_so_a_reclaim_then_is_a_violation() -> None:
    log = Log()
    log.claim(1, "t1", 0.0)
    log.heartbeat("t1", 5.0)     # the lease runs to 13 s
    log.claim(2, "t2", 1.0)
    log.heartbeat("t2", 6.0)
    log.claim(1, "t3", 8.5)      # job 1 handed out again while t1 still held it
    for token in ("t1", "t2", "t3"):
        log.complete(token, 12.0)
    assert limits(log, 2)["violations"] == 1
    # a heartbeat answered stale extends nothing
    stale = Log()
    stale.claim(1, "t1", 0.0)
    stale.heartbeat("t1", 5.0, ok=False)
    stale.claim(2, "t2", 1.0)
    stale.claim(1, "t3", 8.5)
    assert limits(stale, 2)["violations"] == 0


def test_a_hold_ends_no_later_than_the_expiry_the_claim_answered() -> None:
    log = Log()
    # the broker granted 5 s of the 8 asked for: job 1 may be reclaimed at 5 s
    log.log.claimed([job(1, "t1", sent=0.0, lease_s=5.0)], "w0", 0.0, 0.01, LEASE)
    log.claim(2, "t2", 1.0)
    log.claim(1, "t3", 6.0)
    for token in ("t2", "t3"):
        log.complete(token, 7.0)
    [first] = [h for h in held_intervals(log.json(), WALL0) if h.token == "t1"]
    assert first.end == pytest.approx(5.005, abs=1e-6)
    assert check_group_limits(held_intervals(log.json(), WALL0), 2)["violations"] == 0
    # by the lease asked for alone, t1 would still hold job 1 when t3 got it
    assert check_group_limits(held_intervals(log.json()), 2)["violations"] == 1


def test_touching_holds_are_not_overlapping_and_ungrouped_jobs_are_not_counted() -> None:
    log = Log()
    log.claim(1, "t1", 0.0)
    log.complete("t1", 2.0)
    log.log.claimed([job(2, "t2")], "w0", 1.9, 2.0, LEASE)  # answered as t1's complete went
    log.claim(3, "t3", 0.5, group=None)
    log.claim(4, "t4", 0.6, group=None)
    out = limits(log, 1)
    assert out["violations"] == 0 and out["holds"] == 2 and out["groups"] == 1


def fifo_log(order: list[int]) -> Log:
    """One fifo group whose jobs 1..n are claimed and completed one at a time, in
    ``order``."""
    log = Log()
    t = 0.0
    for seq in order:
        log.claim(seq, f"t{seq}", t)
        log.complete(f"t{seq}", t + 0.5)
        t += 1.0
    return log


def test_a_fifo_log_settled_out_of_push_order_is_caught() -> None:
    out = check_group_order(fifo_log([1, 2, 4, 3, 5]).json(), set())
    assert out["completion_violations"] == 1 and out["claim_violations"] == 1
    assert out["completion_samples"] == [{"group": "g1", "job": job_id_for(3),
                                          "after": job_id_for(4)}]


def test_a_clean_fifo_log_with_a_retried_failure_passes() -> None:
    log = Log()
    log.claim(1, "a1", 0.0)
    log.fail("a1", 0.5)          # retried: it keeps its place, job 2 waits
    log.claim(1, "a2", 1.0)
    log.complete("a2", 1.5)
    log.claim(2, "b1", 2.0)
    log.complete("b1", 2.5)
    log.claim(3, "c1", 3.0)
    log.fail("c1", 3.5, status="dead")  # dead: leaves the order (group_dead skip)
    log.claim(4, "d1", 4.0)
    log.complete("d1", 4.5)
    log.claim(3, "c2", 9.0)      # redriven in the drain, completed last
    log.complete("c2", 9.5)
    out = check_group_order(log.json(), {job_id_for(3)})
    assert (out["completion_violations"], out["claim_violations"]) == (0, 0)
    assert out["completed"] == 3
    assert limits(log, 1)["violations"] == 0
    # without knowing job 3 died, its late completion is out of order
    assert check_group_order(log.json(), set())["completion_violations"] == 1


def test_the_order_is_per_group() -> None:
    log = Log()
    log.claim(5, "x", 0.0, group="g2")
    log.complete("x", 0.5)
    log.claim(1, "y", 1.0, group="g3")
    log.complete("y", 1.5)
    assert check_group_order(log.json(), set())["completion_violations"] == 0


def test_group_checks_fail_only_what_was_applied() -> None:
    log = Log()
    for seq in (2, 1, 3):
        log.claim(seq, f"t{seq}", 0.1 * seq)
    heads = HeadSamples(2)
    on = group_checks(log.json(), WALL0, heads, limit=2, order=None, applied=True, died=set())
    assert on["failures"] == {"group_limit_exceeded": 1, "group_order_violations": 0}
    assert on["limit_check"] == "applied" and on["order_check"] == "not applicable"
    off = group_checks(log.json(), WALL0, heads, limit=2, order=None, applied=False,
                       died=set())
    assert off["failures"] == {"group_limit_exceeded": 0, "group_order_violations": 0}
    assert off["limit_check"] == "not applicable" and off["log"]["max_held"] == 3
    fifo = group_checks(fifo_log([2, 1]).json(), WALL0, None, limit=None, order="fifo",
                        applied=True, died=set())
    assert fifo["limit"] == 1
    assert fifo["failures"] == {"group_limit_exceeded": 0, "group_order_violations": 2}


def test_lease_margins_compare_the_answered_expiry_with_send_plus_lease() -> None:
    log = Log()
    log.claim(1, "t1", 3.0)
    assert lease_margins(log.json(), WALL0) == {"min": 0.005, "max": 0.005}
    assert lease_margins(log.json(), WALL0 + 1.0) == {"min": -0.995, "max": -0.995}


def head(jobs: list[dict[str, Any]], claims: list[dict[str, Any]] | None = None
         ) -> dict[str, Any]:
    return {"jobs": jobs, **({"claims": claims} if claims is not None else {})}


def test_head_samples_count_claimed_lines_per_group_and_catch_one_above_the_limit() -> None:
    lines = [{"id": job_id_for(i), "status": "claimed", "group": "g1"} for i in (1, 2, 3)]
    lines += [{"id": job_id_for(4), "status": "claimed", "group": "g2"},
              {"id": job_id_for(5), "status": "pending", "group": "g1"},
              {"id": job_id_for(6), "status": "dead", "group": "g2"},
              {"id": job_id_for(7), "status": "claimed"}]
    records: list[dict[str, Any]] = [{"fence": 1, "n": 6, "settled": [0, 1]},
                                     {"fence": 9, "n": 2}]
    claimed, dead, unattributed = head_claimed_by_group(head(lines, records))
    assert claimed == {"g1": [job_id_for(i) for i in (1, 2, 3)], "g2": [job_id_for(4)]}
    assert dead == {job_id_for(6)}
    assert unattributed == 2  # 7 positions held by records, 5 claimed lines
    samples = HeadSamples(2)
    samples.add(head(lines[3:]), 1.0)
    samples.add(None, 1.5)
    assert samples.summary()["violations"] == 0
    samples.add(head(lines), 2.0)
    s = samples.summary()
    assert s["samples"] == 2 and s["violations"] == 1 and s["max_claimed"] == 3
    assert s["violation_samples"] == [{"group": "g1", "t": 2.0, "limit": 2,
                                       "held": [job_id_for(i) for i in (1, 2, 3)]}]
    assert HeadSamples(None).summary()["violations"] == 0


def test_group_of_names_every_group_and_skews_towards_the_first() -> None:
    rng = random.Random(1)
    names = [group_of(rng, 1000, 2.0) for _ in range(20_000)]
    assert all(len(n) == 6 and n.startswith("g") and 0 <= int(n[1:]) < 1000 for n in names)
    first = sum(1 for n in names if n < "g00010")
    last = sum(1 for n in names if n >= "g00990")
    assert first > 5 * last
    rng = random.Random(1)
    assert {group_of(rng, 3, 1.0) for _ in range(200)} == {"g00000", "g00001", "g00002"}
