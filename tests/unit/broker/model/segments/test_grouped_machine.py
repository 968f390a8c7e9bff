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
from hypothesis.stateful import invariant, precondition, rule

from broker.model import transitions as T
from broker.model.job import PENDING
from broker.model.ops import Cancel, Configure, Reclaim
from broker.model.segments.refs import is_taken
from tests.support.group_machines import LEASE_MS, GroupClaimsMachine
from tests.support.tiers import examples

GROUPS: list[str | None] = [None, "a", "b", "c"]
limits = st.none() | st.integers(0, 3)


class GroupedClaims(GroupClaimsMachine):
    def __init__(self) -> None:
        super().__init__({"group_limit": 2})

    # -- helpers -------------------------------------------------------------------

    def limit(self, group: str | None) -> int | None:
        return self.settings().limit_of(group)

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
        self.push_jobs([(g, p, d, None) for g, p, d in jobs])

    @precondition(lambda self: len(self.seg_groups) < 6)  # (all windows stay loaded)
    @rule(groups=st.lists(st.sampled_from(GROUPS), min_size=1, max_size=10))
    def push_segment(self, groups: list[str | None]) -> None:
        """A push by reference (grouped, format 3, or ungrouped when no job has a group)."""
        self.push_segment_of(groups, max_attempts=3)

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
        out, jobs, got = self.claimed(n)
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

    @rule(ms=st.sampled_from([1, 1_000, 2_500, LEASE_MS + 1]))
    def reclaim(self, ms: int) -> None:
        self.now += ms
        T.apply(self.state, Reclaim(), self.now)

    @rule(limit=limits, a=limits, weight=st.integers(1, 3))
    def configure(self, limit: int | None, a: int | None, weight: int) -> None:
        T.apply(self.state, Configure({"group_limit": limit, "group_limits": {"a": a},
                                       "group_weights": {"b": weight}}), self.now)

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def counts_equal_the_records(self) -> None:
        self.assert_held_counts(GROUPS)


GroupedClaims.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestGroupedClaims = GroupedClaims.TestCase
