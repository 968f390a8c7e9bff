"""Released group ids reused as aggressively as they can be (broker.model.groups.sweep),
through the transitions, under random steps: many short-lived groups, a names table
swept at every claim (its cap set to 0 first) and between any two steps, limits of
1-2, fair and fifo order, ``group_dead`` skip and hold, per-group rates, inline
pushes and grouped segments, claims, completions, failures (retried or dead),
releases, reclaims, redrives, purges, cancels and takeovers.

After every claim: no group over its limit (fifo: one at a time, its oldest
pending job, none while it holds a dead job under ``hold``); each group's claims
within its own token bucket (a model bucket per name: a sweep must never hand a
group a fresh burst, nor a reused id another group's bucket); the claim stopped
early only if no group was eligible (nothing stranded). After every step: the
held counts equal the ones rebuilt from the claim records, every gid a piece
refers to is interned (never released while referenced), and the stats agree.
At the end the queue is drained: every job pushed was completed exactly once,
or cancelled, or purged (none lost, none duplicated)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from broker.model import transitions as T
from broker.model.groups.sweep import release_unused
from broker.model.job import CLAIMED, DEAD
from broker.model.ops import Complete, CompleteItem, Configure, Reclaim, Redrive
from broker.model.segments.grouped import group_stats
from tests.support.group_machines import LEASE_MS, RatedGroupClaims
from tests.support.tiers import examples

#: Few enough that ids are freed and taken again all the time.
GROUPS: list[str | None] = [None, *(f"g{i}" for i in range(6))]


class ReusedIds(RatedGroupClaims):
    def __init__(self) -> None:
        super().__init__({"group_limit": 1})
        self.pushed: set[int] = set()
        self.completed: list[int] = []
        self.gone: set[int] = set()  # cancelled or purged

    # -- helpers -------------------------------------------------------------------

    def claim_some(self, n: int) -> list[Any]:
        """One claim of ``n`` jobs, checked (see the module's docstring)."""
        if self.state.groups is not None:
            self.state.groups.names.cap = 0  # (this claim sweeps the names first)
        out, jobs, _ = self.checked_claim(n)
        assert len({job.seq for job in jobs}) == len(jobs)
        if len(out) < n:
            assert self.heads() == {}, "the claim stopped while a group was eligible"
        return out

    def completed_one(self, seq: int) -> None:
        self.completed.append(seq)

    def removed(self, seqs: set[int]) -> None:
        self.gone |= seqs

    # -- rules -----------------------------------------------------------------------

    @rule(jobs=st.lists(st.tuples(st.sampled_from(GROUPS), st.integers(0, 1),
                                  st.sampled_from([0, 0, 0, 2]), st.integers(1, 2)),
                        min_size=1, max_size=6))
    def push(self, jobs: list[tuple[str | None, int, int, int]]) -> None:
        self.pushed.update(int(i[1:]) for i in self.push_jobs(list(jobs)))

    @rule(groups=st.lists(st.sampled_from(GROUPS[1:]), min_size=1, max_size=6))
    def push_segment(self, groups: list[str | None]) -> None:
        if len(self.seg_groups) >= 5:
            return
        first = self.push_segment_of(groups, max_attempts=2)
        self.pushed.update(range(first, first + len(groups)))

    @rule(n=st.integers(1, 6))
    def claim(self, n: int) -> None:
        self.claim_some(n)

    @rule()
    def sweep(self) -> None:
        """A sweep between two steps (where no call holds a gid), releasing all it may."""
        groups = self.state.groups
        if groups is not None:
            release_unused(groups, {(r.key, r.etag) for r in self.state.segment_refs}, floor=0)

    @rule(order=st.sampled_from(["fifo", "fair"]), dead=st.sampled_from(["skip", "hold"]),
          rate=st.sampled_from([0, 1, 2, 5]), burst=st.integers(0, 2),
          limit=st.sampled_from([None, 1, 2]))
    def configure(self, order: str, dead: str, rate: int, burst: int, limit: int | None) -> None:
        if order == "fifo" and limit == 2:
            limit = 1  # (fifo allows one claimed job per group: configure refuses more)
        self.rerate(rate, burst)
        T.apply(self.state, Configure({"group_order": order, "group_dead": dead,
                                       "group_rate_per_s": rate, "group_burst": burst,
                                       "group_limit": limit}), self.now)

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def counts_equal_the_records_and_no_referenced_id_is_free(self) -> None:
        self.assert_held_counts(GROUPS)
        groups = self.state.groups
        if groups is None:
            return
        held = self.held()
        names = groups.names
        assert len(set(names.ids.values())) == len(names.ids)
        for name, gid in names.ids.items():
            assert names.name(gid) == name
        pieces = [*groups.dispatch.gids(), *(groups.dispatch.buckets or ()),
                  *(gid for gid, heap in groups.heaps.items() if heap), *groups.dead,
                  *groups.untold, *(gid for d in groups.dirs.values() for gid in d.gids)]
        for gid in pieces:
            names.name(gid)  # (KeyError: a piece refers to a released id)
        for gid in groups.dispatch.gids():
            view = groups.dispatch.view(gid)
            assert view is not None and view.held == held.get(names.name(gid), 0)

    @invariant()
    def stats_agree(self) -> None:
        stats = group_stats(self.state, self.now)
        if stats is None:
            return
        held = self.held()
        assert stats["claimed"] == sum(held.values())
        for row in stats["busiest"]:
            assert row["claimed"] == held.get(row["group"], 0), (row, held)

    def teardown(self) -> None:
        """Drain the queue: every job pushed ends completed once, cancelled or purged."""
        T.apply(self.state, Configure({}), self.now)
        for _ in range(200):
            self.now += LEASE_MS + 1
            T.apply(self.state, Reclaim(), self.now)
            T.apply(self.state, Redrive(), self.now)
            out = self.claim_some(50)
            if out:
                T.apply(self.state, Complete(tuple(CompleteItem(j.token) for j in out)),
                        self.now)
                self.completed += [int(j.id[1:]) for j in out]
            elif not self.pending() and not any(
                    j.status in (CLAIMED, DEAD) for j in self.state.jobs.values()):
                break
        assert not self.pending(), "a job is stranded"
        assert len(self.completed) == len(set(self.completed)), "a job completed twice"
        assert not set(self.completed) & self.gone
        assert set(self.completed) | self.gone == self.pushed, "a job was lost"


ReusedIds.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestReusedIds = ReusedIds.TestCase
