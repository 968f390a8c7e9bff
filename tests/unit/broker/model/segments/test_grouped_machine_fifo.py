"""Fifo groups, dead holds and per-group rates in the claims of a queue that uses
groups (broker.model.segments.grouped), wired through broker.model.transitions,
under random steps: inline pushes into groups (priorities, delays, one or two
attempts), grouped segments pushed by reference, claims, completions, failures
(retried at once or later, or dead), releases, reclaims, redrives, purges of
dead jobs, cancels of pending jobs, changes of ``group_order``,
``group_dead`` and the per-group rate, and takeovers (encoded, decoded, taken
over: the order, holds and counts rebuilt from the head).

After every claim, in fifo order: a group holds at most one claimed job; a
grouped job claimed was its group's oldest pending job (inline or in a
segment), due, its group holding none and (``group_dead: "hold"``) no dead
job; priority first among the groups' heads; the claim stopped early only if
no group was eligible. In either order each group's claims fit its token
bucket (a model :class:`broker.model.ratelimit.TokenBucket` per group, kept
across rebuilds of the broker's group structures, full again after a takeover
or a rate of 0, capped by a new rate). After every step the broker's held counts equal the ones
rebuilt from the head's claim records."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from broker.model import transitions as T
from broker.model.ops import Configure
from tests.support.group_machines import RatedGroupClaims
from tests.support.tiers import examples

GROUPS: list[str | None] = [None, "a", "b", "c"]


class FifoClaims(RatedGroupClaims):
    def __init__(self) -> None:
        super().__init__({"group_order": "fifo"})

    # -- helpers -------------------------------------------------------------------

    def after(self) -> None:
        """The broker's group structures may have been rebuilt (a settings change, a
        cancel in a grouped segment): its buckets are kept (only a takeover, or a
        rate of 0, starts them full: see ``takeover`` and ``configure``)."""

    def removed(self, seqs: set[int]) -> None:
        self.after()  # (a cancel in a grouped segment may rebuild them)

    # -- rules -----------------------------------------------------------------------

    @rule(jobs=st.lists(st.tuples(st.sampled_from(GROUPS), st.integers(0, 2),
                                  st.sampled_from([0, 0, 0, 2]), st.integers(1, 2)),
                        min_size=1, max_size=6))
    def push(self, jobs: list[tuple[str | None, int, int, int]]) -> None:
        self.push_jobs(list(jobs))

    @rule(groups=st.lists(st.sampled_from(GROUPS[1:]), min_size=1, max_size=6))
    def push_segment(self, groups: list[str | None]) -> None:
        if len(self.seg_groups) >= 5:
            return
        self.push_segment_of(groups, max_attempts=2)

    @rule(n=st.integers(1, 6))
    def claim(self, n: int) -> None:
        out, jobs, s = self.checked_claim(n)
        self.after()
        left = self.heads()
        if len(out) < n:
            assert left == {}, ("the claim stopped while a group was eligible", left)
        if s.fifo:
            for job in jobs:
                for jobs_left in left.values():
                    assert all(job.priority >= p.priority for p in jobs_left), \
                        "a lower priority came first"

    @rule(order=st.sampled_from(["fifo", "fifo", "fair"]), dead=st.sampled_from(["skip", "hold"]),
          rate=st.sampled_from([0, 0, 2, 5]), burst=st.integers(0, 2))
    def configure(self, order: str, dead: str, rate: int, burst: int) -> None:
        self.rerate(rate, burst)
        T.apply(self.state, Configure({"group_order": order, "group_dead": dead,
                                       "group_rate_per_s": rate, "group_burst": burst}),
                self.now)
        self.after()

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def counts_equal_the_records(self) -> None:
        # (a group may hold more than one claimed job in fifo order only if they were
        # claimed before a change to fifo: the claim rule above pins that none is added)
        self.assert_held_counts(GROUPS)


FifoClaims.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestFifoClaims = FifoClaims.TestCase
