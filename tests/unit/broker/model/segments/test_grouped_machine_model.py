"""Claims of a queue that uses groups (broker.model.segments.grouped), wired
through broker.model.transitions with claims of segments held in claim records
(``held_in_records``, the broker's default), checked against a simple model
of its own: every job's group and status, every lease handed out (which
claim, when it expires, marked for cancel) kept by the rules, never read back
from the state under test.

Steps: inline pushes (groups, priorities, delays, one or two attempts),
pushes by reference into grouped or ungrouped segments, claims, completions,
failures (retried or dead), releases, cancels of pending or claimed jobs,
purges of pending, dead or claimed jobs, redrives, reclaims of expired leases,
the owner's clock stepping back (and stats read ahead of it),
changes of every group setting (limits and per-group overrides, weights, fair
or fifo, dead held or skipped, per-group rate, or none at all: the queue stops
using groups while jobs are held), and takeovers (the head encoded, decoded,
taken over on a clock that may be behind the old owner's).

After every claim: each job handed out was pending in the model, answered
with its own group; no group went past its limit (counted by the model); in
fifo order a group got a job only while holding none. After every step: the
model's held count of each group equals the broker's and the one rebuilt from
the head's claim records; the stats' counts (pending, claimed, dead, the
groups' claimed total, each group's pending jobs and those held back by a
limit: ``check_groups_pending`` says which count) equal the model's; the head decodes and encodes to
the same bytes, and the decoded head rebuilds the same held counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.counts import held_by_group
from broker.model.groups.directories import group_major
from broker.model.groups.settings import parse_group_settings
from broker.model.job import CANCELLED, CLAIMED, COMPLETED, DEAD, PENDING
from broker.model.job_lines import pending_from_line
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    Configure,
    Fail,
    FailItem,
    NewJob,
    Purge,
    Push,
    PushPayloads,
    ReadStats,
    Reclaim,
    Redrive,
    Release,
    Reserve,
    TakeOver,
    groups_of,
)
from broker.model.segments.refs import holding
from broker.model.state import SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import QUEUE, new_queue, read_back
from tests.support.tiers import examples

T0 = 1_767_225_600_000
LEASE_MS = 5_000
GROUPS: list[str | None] = [None, "a", "b", "c"]
GONE = "gone"
limits = st.none() | st.integers(0, 3)


@dataclass
class Lease:
    """The model of one job handed out by a claim."""

    seq: int
    group: str | None
    claim: int  # which claim (the model's count)
    marked: bool = False
    settled: bool = False


class ModelGroupedClaims(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.state = new_queue(T0)
        self.windows = SegmentWindows()
        self._bind(self.state)
        T.apply(self.state, Configure({"group_limit": 2}), T0)
        self.group: dict[int, str | None] = {}  # seq -> its group
        self.status: dict[int, str] = {}  # seq -> status, as the model has it
        self.leases: dict[str, Lease] = {}  # token -> lease
        self.expires: dict[int, int] = {}  # claim -> when its leases expire
        self.claims = 0
        self.owner = 0
        self.segments = 0

    # -- helpers -------------------------------------------------------------------

    def _bind(self, state: Any, held: Any = None) -> None:
        state.windows = self.windows
        state.held_in_records = True
        if held is not None:
            state.held = held  # (the broker's held-lines cache: one per queue)

    def settings(self) -> Any:
        return parse_group_settings(self.state.settings.groups, "t")

    def live(self) -> list[str]:
        return [t for t, lease in self.leases.items() if not lease.settled]

    def model_held(self) -> dict[str | None, int]:
        out: dict[str | None, int] = {}
        for lease in self.leases.values():
            if not lease.settled:
                out[lease.group] = out.get(lease.group, 0) + 1
        return out

    def settle(self, token: str, status: str) -> None:
        lease = self.leases[token]
        lease.settled = True
        self.status[lease.seq] = status

    def status_in_state(self, seq: int) -> str | None:
        job = self.state.jobs.get(seq)
        return None if job is None else (PENDING if isinstance(job, bytes) else job.status)

    def run_at(self, seq: int) -> int:
        """When pending job ``seq`` is due: its line's or job's run-at in the head,
        else its segment's."""
        job = self.state.jobs.get(seq)
        if job is not None:
            return (pending_from_line(seq, job) if isinstance(job, bytes) else job).run_at_ms
        at = holding(self.state.segment_refs, seq)
        assert at is not None, seq  # (pending in the model: in the head or a segment)
        return self.state.segment_refs[at].run_at_ms

    def eligible(self) -> list[int]:
        """The pending jobs a claim could take now (without per-group rates): due,
        their group below its limit; in fifo order, their group's oldest pending
        job, its group holding none and (dead held) no dead job."""
        s, held = self.settings(), self.model_held()
        pending = sorted(q for q, st_ in self.status.items() if st_ == PENDING)
        dead = {self.group[q] for q, st_ in self.status.items() if st_ == DEAD}
        out, seen = [], set()
        for seq in pending:
            group = self.group[seq]
            fifo = s.fifo and group is not None
            if fifo and group in seen:
                continue
            seen.add(group)
            limit = s.limit_of(group)
            if self.run_at(seq) > self.now or (limit is not None and held.get(group, 0) >= limit):
                continue
            if fifo and (held.get(group) or (s.holds_dead and group in dead)):
                continue
            out.append(seq)
        return out

    def after_settle(self, token: str, answer_status: str | None) -> None:
        """A job left claimed other than by completion: pending or dead, as the
        head now has it (its retries are the model's business only in count)."""
        seq = self.leases[token].seq
        now = self.status_in_state(seq)
        assert now in (PENDING, DEAD), (seq, now)
        if answer_status is not None:
            assert answer_status == now, (answer_status, now)
        self.settle(token, now)

    # -- rules -----------------------------------------------------------------------

    @rule(jobs=st.lists(st.tuples(st.sampled_from(GROUPS), st.integers(0, 2),
                                  st.sampled_from([0, 0, 0, 2]), st.integers(1, 2)),
                        min_size=1, max_size=6))
    def push(self, jobs: list[tuple[str | None, int, int, int]]) -> None:
        first = self.state.counters.enqueued + 1
        T.apply(self.state, Push(tuple(
            NewJob(b"%d" % i, priority=p, delay_ms=d * 1000, group=g, max_attempts=m)
            for i, (g, p, d, m) in enumerate(jobs))), self.now)
        for i, (g, _, _, _) in enumerate(jobs):
            self.group[first + i], self.status[first + i] = g, PENDING

    @precondition(lambda self: self.segments < 5)  # (all windows stay loaded)
    @rule(groups=st.lists(st.sampled_from(GROUPS), min_size=1, max_size=8),
          ungrouped=st.booleans(), priority=st.integers(0, 2),
          delay=st.sampled_from([0, 0, 2_000]))
    def push_segment(self, groups: list[str | None], ungrouped: bool, priority: int,
                     delay: int) -> None:
        """A push by reference: seqs reserved, the segment "written" (group-major,
        format 3 if a job has a group; or all without a group), its ref pushed,
        its lines loaded."""
        if ungrouped:
            groups = [None] * len(groups)
        state = self.state
        first = T.apply(state, Reserve(len(groups), 8), self.now).ids.first
        gm = group_major([b"%d" % (100 + i) for i in range(len(groups))], groups)
        run_at = self.now + delay
        data = encode_segment(QUEUE, first, priority, run_at, gm.payloads, max_attempts=2,
                              groups=gm.runs)
        ref = SegmentRef(segment_key(QUEUE, segment_name(first, "0123abcd")), f'"e{first}"',
                         first, len(groups), priority, run_at,
                         groups=None if gm.runs is None else len(gm.runs))
        T.apply(state, PushPayloads((), refs=(ref,)), self.now)
        lines = segment_lines(data, ref)
        if gm.runs is None:
            self.windows.put(ref, 0, lines)
        else:
            self.windows.put_grouped(ref, lines, gm.runs)
        order = [g for g, k in gm.runs or [(None, len(groups))] for _ in range(k)]
        for i, g in enumerate(order):
            self.group[first + i], self.status[first + i] = g, PENDING
        self.segments += 1

    @rule(n=st.integers(1, 6))
    def claim(self, n: int) -> None:
        s, before = self.settings(), self.model_held()
        out = T.apply(self.state, Claim("w", n, LEASE_MS), self.now).jobs
        answered = groups_of(out)
        self.claims += 1
        self.expires[self.claims] = self.now + LEASE_MS
        got: dict[str | None, int] = {}
        for i, (job_id, token) in enumerate(zip(out.ids, out.tokens, strict=True)):
            seq = int(job_id[1:])
            assert self.status.get(seq) == PENDING, (seq, self.status.get(seq))
            group = self.group[seq]
            assert answered.get(i) == group, (seq, answered.get(i), group)
            self.leases[token] = Lease(seq, group, self.claims)
            self.status[seq] = CLAIMED
            got[group] = got.get(group, 0) + 1
        if len(out) < n and not s.rate_per_s > 0:
            assert self.eligible() == [], ("a claim stopped short", self.eligible())
        for group, k in got.items():
            limit = s.limit_of(group)
            assert limit is None or before.get(group, 0) + k <= limit, (group, before, got)
            if s.fifo and group is not None:
                assert k == 1 and not before.get(group), (group, before, got)

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(self.live()))
        [answer] = T.apply(self.state, Complete((CompleteItem(token),)), self.now).items
        if self.leases[token].marked:
            assert (answer.ok, answer.status) == (False, CANCELLED), answer
            self.settle(token, CANCELLED)
        else:
            assert answer.ok, answer
            self.settle(token, COMPLETED)

    @precondition(lambda self: self.live())
    @rule(data=st.data(), retry=st.sampled_from([0, 1_000]))
    def fail(self, data: st.DataObject, retry: int) -> None:
        token = data.draw(st.sampled_from(self.live()))
        [answer] = T.apply(self.state, Fail((FailItem(token, "boom", retry_in_ms=retry),)),
                           self.now).items
        if self.leases[token].marked:
            assert (answer.ok, answer.status) == (False, CANCELLED), answer
            self.settle(token, CANCELLED)
        else:
            assert answer.ok, answer
            self.after_settle(token, answer.status)

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(self.live()))
        ids = T.apply(self.state, Release((token,)), self.now).ids
        if self.leases[token].marked:
            assert list(ids) == []
            self.settle(token, CANCELLED)
        else:
            assert list(ids) == [f"j{self.leases[token].seq:010d}"], ids
            self.settle(token, PENDING)

    @precondition(lambda self: self.status)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.status)))
        T.apply(self.state, Cancel((f"j{seq:010d}",)), self.now)
        if self.status[seq] == PENDING:
            self.status[seq] = CANCELLED
        elif self.status[seq] == CLAIMED:
            for lease in self.leases.values():
                if lease.seq == seq and not lease.settled:
                    lease.marked = True

    @rule(statuses=st.sampled_from([(PENDING,), (DEAD,), (CLAIMED,), (PENDING, DEAD)]))
    def purge(self, statuses: tuple[str, ...]) -> None:
        T.apply(self.state, Purge(statuses), self.now)
        for seq, status in self.status.items():
            if status in statuses:
                self.status[seq] = GONE
        if CLAIMED in statuses:
            for lease in self.leases.values():
                lease.settled = True

    @rule()
    def redrive(self) -> None:
        T.apply(self.state, Redrive(), self.now)
        for seq, status in self.status.items():
            if status == DEAD:
                self.status[seq] = PENDING

    @rule(ms=st.sampled_from([1, 400, 1_000, 2_500, LEASE_MS + 1]))
    def tick_and_reclaim(self, ms: int) -> None:
        self.now += ms
        T.apply(self.state, Reclaim(), self.now)
        for token, lease in self.leases.items():
            if not lease.settled and self.expires[lease.claim] <= self.now:
                if lease.marked:
                    self.settle(token, CANCELLED)
                else:
                    self.after_settle(token, None)

    @rule(ms=st.sampled_from([1, 1_500, 3_000]))
    def step_back(self, ms: int) -> None:
        """The owner's clock steps back (never before the queue's start)."""
        self.now = max(T0, self.now - ms)

    @rule(ms=st.sampled_from([1_500, 3_000]))
    def stats_ahead(self, ms: int) -> None:
        """A stats read at a later time than the steps after it (the clock stepped
        back since): it registers the grouped segments due then."""
        T.apply(self.state, ReadStats(), self.now + ms)

    @rule(limit=limits, a=limits, b=limits, weight=st.integers(1, 3),
          order=st.sampled_from(["fair", "fair", "fifo"]), dead=st.sampled_from(["skip", "hold"]),
          rate=st.sampled_from([0, 0, 2, 5]), burst=st.integers(0, 2), off=st.booleans())
    def configure(self, limit: int | None, a: int | None, b: int | None, weight: int,
                  order: str, dead: str, rate: int, burst: int, off: bool) -> None:
        if off:  # (every group setting back to its default: the queue may stop using groups)
            change: dict[str, Any] = {"group_limit": None, "group_limits": None,
                                      "group_weights": None, "group_order": None,
                                      "group_dead": None, "group_rate_per_s": None,
                                      "group_burst": None}
        else:
            overrides = {"a": a, "b": b}
            if order == "fifo":  # (a fifo group holds one job at most: limits 0 or 1)
                limit = None if limit is None else min(limit, 1)
                overrides = {k: min(v, 1) for k, v in overrides.items() if v is not None}
            change = {"group_limit": limit, "group_limits": overrides,
                      "group_weights": {"c": weight}, "group_order": order, "group_dead": dead,
                      "group_rate_per_s": rate, "group_burst": burst}
        T.apply(self.state, Configure(change), self.now)

    @rule(skew=st.sampled_from([1, 1, -2_000, 3_000]))
    def takeover(self, skew: int) -> None:
        """A new broker reads the head back and takes it over on its own clock
        (maybe behind the old owner's): every live lease gets its own length
        from that clock."""
        codec.stamp(self.state, "b", self.now, f"c-{self.state.seq}")
        held = self.state.held
        self.state = read_back(codec.encode(self.state))
        self._bind(self.state, held)
        self.now = max(T0, self.now + skew)
        self.owner += 1
        T.apply(self.state, TakeOver(f"b-{self.owner}", "http://b", 30_000), self.now)
        for claim in self.expires:
            self.expires[claim] = self.now + LEASE_MS

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def held_counts_are_the_models(self) -> None:
        want = {g: n for g, n in self.model_held().items() if n}
        assert held_by_group(self.state.claim_records.values(), self.state.jobs) == want
        groups = self.state.groups
        if groups is not None:
            for group in GROUPS:
                assert groups.held(group) == want.get(group, 0), (group, want)

    @invariant()
    def stats_count_the_models_jobs(self) -> None:
        view = T.apply(self.state, ReadStats(), self.now).view
        counts = view["counts"]
        for status in (PENDING, CLAIMED, DEAD):
            want = sum(1 for s in self.status.values() if s == status)
            assert counts[status] == want, (status, counts, want)
        if "groups" in view:
            assert view["groups"]["claimed"] == sum(self.model_held().values()), view["groups"]
            self.check_groups_pending(view["groups"])

    def check_groups_pending(self, block: dict[str, Any]) -> None:
        """The groups block's pending count of each named group is the model's:
        its pending jobs, due ones only in fair order (every one in fifo: a
        group's head is its oldest, due or not), so their sum is the queue's
        pending jobs with a group (due, in fair order). No group's row (None)
        counts at most its due pending jobs in the head or in a grouped segment
        (an ungrouped segment's are not counted; its row shows once a claim has
        told dispatch its head). ``held_back`` is the pending jobs of the groups
        at their limit (holding as many as it), and how many of those have some."""
        s, held = self.settings(), self.model_held()
        want: dict[str | None, int] = {}
        for seq, status in self.status.items():
            group = self.group[seq]
            if status != PENDING or (self.run_at(seq) > self.now and not (
                    s.fifo and group is not None)):
                continue
            if group is None and seq not in self.state.jobs.entries:
                at = holding(self.state.segment_refs, seq)
                if at is None or self.state.segment_refs[at].groups is None:
                    continue  # (in an ungrouped segment)
            want[group] = want.get(group, 0) + 1
        got = {row["group"]: row["pending"] for row in block["busiest"] if row["pending"]}
        assert got.get(None, 0) <= want.get(None, 0), (got, want)
        got.pop(None, None)
        want.pop(None, None)
        assert got == want, (got, want)
        at_limit = [g for g in want if (limit := s.limit_of(g)) is not None
                    and held.get(g, 0) >= limit]
        assert block["held_back"] == {"jobs": sum(want[g] for g in at_limit),
                                      "groups_at_limit": len(at_limit)}, (block, want, held)

    @invariant()
    def the_head_reads_back(self) -> None:
        codec.stamp(self.state, "b", self.now, f"c-{self.state.seq}")
        data = codec.encode(self.state)
        back = read_back(data)
        assert codec.encode(back) == data
        want = {g: n for g, n in self.model_held().items() if n}
        assert held_by_group(back.claim_records.values(), back.jobs) == want


ModelGroupedClaims.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestModelGroupedClaims = ModelGroupedClaims.TestCase
