"""Claims of a queue that uses groups (broker.model.segments.grouped), wired
through broker.model.transitions, under random steps: pushes into groups with
priorities and delays, pushes by reference into segments (grouped ones, format
3, group-major; or ungrouped ones when no job has a group), claims, cancels of
jobs still pending in a segment, completions, failures (retried or dead),
releases, reclaims of expired leases, limit changes, and takeovers (the head
encoded, decoded, taken over: the counts rebuilt from the claim records).

After every claim: no group got a job while at its limit (never more held
than the limit); the claim stopped early only if no group below its limit had
a due pending job; priority first (no job claimed below the priority of an
eligible job left pending); oldest first within a group. After every step:
the broker's held counts equal the ones rebuilt from the head's claim
records (broker.model.groups.counts.held_by_group), and the head decodes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.counts import held_by_group
from broker.model.groups.directories import group_major
from broker.model.groups.settings import parse_group_settings
from broker.model.job import CLAIMED, PENDING
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    Configure,
    Fail,
    FailItem,
    NewJob,
    Push,
    PushPayloads,
    Reclaim,
    Release,
    Reserve,
    TakeOver,
)
from broker.model.segments.refs import is_taken
from broker.model.state import SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import QUEUE, committed, new_queue
from tests.support.tiers import examples

T0 = 1_767_225_600_000
LEASE_MS = 5_000
GROUPS: list[str | None] = [None, "a", "b", "c"]
limits = st.none() | st.integers(0, 3)


class GroupedClaims(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.state = new_queue(T0)
        T.apply(self.state, Configure({"group_limit": 2}), T0)
        self.tokens: list[str] = []  # tokens claims answered (some stale since)
        self.owner = 0
        self.windows = SegmentWindows()  # (the segments' lines, "loaded" when written)
        self.state.windows = self.windows
        self.seg_groups: dict[int, list[str | None]] = {}  # first seq -> group a position

    # -- helpers -------------------------------------------------------------------

    def limit(self, group: str | None) -> int | None:
        return parse_group_settings(self.state.settings.groups, "t").limit_of(group)

    def held(self) -> dict[str | None, int]:
        return held_by_group(self.state.claim_records.values(), self.state.jobs)

    def live(self) -> list[str]:
        state, out = self.state, []
        assert state.tagger is not None
        for token in self.tokens:
            job = state.jobs.get(int(token[1:11]))
            if job is not None and job.status == CLAIMED and job.lease_token is not None \
                    and state.tagger.tag(job.lease_token) == token:
                out.append(token)
        self.tokens = out
        return out

    def eligible(self) -> list[Any]:
        """The due pending jobs of groups below their limit."""
        held = self.held()
        out = []
        for job in self.state.jobs.values():
            if job.status == PENDING and job.run_at_ms <= self.now:
                limit = self.limit(job.group)
                if limit is None or held.get(job.group, 0) < limit:
                    out.append(job)
        for ref in self.state.segment_refs:  # (their untaken jobs are pending too)
            if ref.run_at_ms > self.now:
                continue
            for pos, group in enumerate(self.seg_groups[ref.first_seq]):
                limit = self.limit(group)
                if not is_taken(ref, pos) and (limit is None or held.get(group, 0) < limit):
                    out.append(SimpleNamespace(group=group, priority=ref.priority,
                                               run_at_ms=ref.run_at_ms,
                                               seq=ref.first_seq + pos))
        return out

    # -- rules -----------------------------------------------------------------------

    @rule(jobs=st.lists(st.tuples(st.sampled_from(GROUPS), st.integers(0, 2),
                                  st.sampled_from([0, 0, 0, 2])), min_size=1, max_size=8))
    def push(self, jobs: list[tuple[str | None, int, int]]) -> None:
        T.apply(self.state, Push(tuple(NewJob(b"%d" % i, priority=p, delay_ms=d * 1000, group=g)
                                       for i, (g, p, d) in enumerate(jobs))), self.now)

    @precondition(lambda self: len(self.seg_groups) < 6)  # (all windows stay loaded)
    @rule(groups=st.lists(st.sampled_from(GROUPS), min_size=1, max_size=10))
    def push_segment(self, groups: list[str | None]) -> None:
        """A push by reference: seqs reserved, the segment "written" (group-major,
        format 3 if a job has a group), its ref pushed, its lines loaded."""
        state = self.state
        first = T.apply(state, Reserve(len(groups), 8), self.now).ids.first
        gm = group_major([b"%d" % (100 + i) for i in range(len(groups))], groups)
        data = encode_segment(QUEUE, first, 0, self.now, gm.payloads, max_attempts=3,
                              groups=gm.runs)
        ref = SegmentRef(segment_key(QUEUE, segment_name(first, "0123abcd")), f'"e{first}"',
                         first, len(groups), 0, self.now,
                         groups=None if gm.runs is None else len(gm.runs))
        T.apply(state, PushPayloads((), refs=(ref,)), self.now)
        lines = segment_lines(data, ref)
        if gm.runs is None:
            self.windows.put(ref, 0, lines)
        else:
            self.windows.put_grouped(ref, lines, gm.runs)
        self.seg_groups[first] = [group for group, k in gm.runs or [(None, len(groups))]
                                  for _ in range(k)]

    @rule(data=st.data())
    def cancel_in_segment(self, data: st.DataObject) -> None:
        refs = self.state.segment_refs
        if refs:
            ref = data.draw(st.sampled_from(refs))
            pos = data.draw(st.integers(0, ref.count - 1))
            if not is_taken(ref, pos):
                [answer] = T.apply(self.state, Cancel((f"j{ref.first_seq + pos:010d}",)),
                                   self.now).view
                assert answer.ok

    @rule(n=st.integers(1, 6))
    def claim(self, n: int) -> None:
        before = self.held()
        out = list(T.apply(self.state, Claim("w", n, LEASE_MS), self.now).jobs)
        self.tokens += [job.token for job in out]
        jobs = [self.state.jobs[int(job.id[1:])] for job in out]
        got: dict[str | None, int] = {}
        for job in jobs:
            got[job.group] = got.get(job.group, 0) + 1
        for group, k in got.items():
            limit = self.limit(group)
            assert limit is None or before.get(group, 0) + k <= limit, (group, before, got)
        left = self.eligible()
        if len(out) < n:
            assert left == [], "the claim stopped while a group below its limit had a job"
        for job in jobs:
            for other in left:
                assert job.priority >= other.priority, "a lower priority came first"
                if other.group == job.group and other.priority == job.priority:
                    assert (job.run_at_ms, job.seq) < (other.run_at_ms, other.seq), \
                        "not oldest first within a group"

    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        live = self.live()
        if live:
            token = data.draw(st.sampled_from(live))
            assert T.apply(self.state, Complete((CompleteItem(token),)), self.now).items[0].ok

    @rule(data=st.data(), retry=st.sampled_from([0, 1_000]))
    def fail(self, data: st.DataObject, retry: int) -> None:
        live = self.live()
        if live:
            token = data.draw(st.sampled_from(live))
            T.apply(self.state, Fail((FailItem(token, "boom", retry_in_ms=retry),)), self.now)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        live = self.live()
        if live:
            T.apply(self.state, Release((data.draw(st.sampled_from(live)),)), self.now)

    @rule(ms=st.sampled_from([1, 1_000, 2_500, LEASE_MS + 1]))
    def reclaim(self, ms: int) -> None:
        self.now += ms
        T.apply(self.state, Reclaim(), self.now)

    @rule(limit=limits, a=limits, weight=st.integers(1, 3))
    def configure(self, limit: int | None, a: int | None, weight: int) -> None:
        T.apply(self.state, Configure({"group_limit": limit, "group_limits": {"a": a},
                                       "group_weights": {"b": weight}}), self.now)

    @rule()
    def takeover(self) -> None:
        self.now += 1
        self.state = committed(self.state, self.now)
        self.state.windows = self.windows  # (the new owner loads the segments again)
        self.owner += 1
        T.apply(self.state, TakeOver(f"b-{self.owner}", "http://b", 30_000), self.now)

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def counts_equal_the_records(self) -> None:
        groups = self.state.groups
        if groups is not None:
            held = self.held()
            for group in GROUPS:
                assert groups.held(group) == held.get(group, 0), (group, held)


GroupedClaims.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestGroupedClaims = GroupedClaims.TestCase
