"""Group dispatch (broker.model.groups.dispatch) under random steps, against the
plain O(n) reference of tests/support/group_model.py: pushes into groups with
priorities and delays, claims (pick, served), completions, releases, retries
and dead jobs, redrives, cancels, the clock, and changes of limits, weights,
order, dead handling and rates. After every step: the pick equals the
reference's, every group's state, held count, pass and tokens equal the
reference's (no group parked that should be ready, none ready that should
be parked), no claim takes a group past its limit, a fifo group never holds
two jobs and only its oldest, and ready groups stay within one quantum of
their priority's virtual time (the fairness lag)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.model.groups.dispatch import EMPTY, QUANTUM, READY, STRIDE, Dispatch
from broker.model.groups.names import GroupNames
from broker.model.groups.settings import DEFAULT, parse_group_settings
from tests.support.group_model import CLAIMED, DEAD, DONE, PENDING, ReferenceQueue
from tests.support.tiers import examples

GROUPS: list[str | None] = [None, "a", "b", "c", "d"]
groups = st.sampled_from(GROUPS)
named = st.sampled_from(GROUPS[1:])
limits = st.none() | st.integers(0, 3)


class DispatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000
        self.names = GroupNames()
        self.dispatch = Dispatch(DEFAULT, self.names)
        self.ref = ReferenceQueue(DEFAULT)
        self.grew: set[str | None] = set()  # groups served since the last settings change

    # -- helpers -------------------------------------------------------------------

    def gid(self, group: str | None) -> int:
        return self.names.gid(group)

    def head_changed(self, group: str | None) -> None:
        """The caller's side: tell the dispatch a group's head and dead count."""
        self.dispatch.set_head(self.gid(group), self.ref.head(group, self.now), self.now,
                               dead=self.ref.dead(group))
        self.ref.refresh(self.now)

    def settle(self, job: Any, status: str, due_ms: int | None = None) -> None:
        job.status = status
        if due_ms is not None:
            job.due_ms = due_ms
        group = job.group
        self.dispatch.settled(self.gid(group), 1, self.now, head=self.ref.head(group, self.now),
                              dead=self.ref.dead(group))
        self.ref.refresh(self.now)

    def release_names(self) -> None:
        """Names with nothing left anywhere are released, and their ids reused."""
        live = self.ref.live_groups()
        for group in GROUPS[1:]:
            gid = self.names.find(group)
            if gid is not None and group not in live and not self.dispatch.holds(gid):
                self.names.release(gid)

    # -- rules ---------------------------------------------------------------------

    @rule(group=groups, priority=st.sampled_from([0, 0, 1, 5]),
          delay=st.sampled_from([0, 0, 0, 50, 300]))
    def push(self, group: str | None, priority: int, delay: int) -> None:
        self.ref.push(group, priority, self.now + delay)
        self.head_changed(group)

    @rule(want=st.integers(1, 20))
    def claim(self, want: int) -> None:
        while want > 0:
            got = self.dispatch.pick(self.now, want)
            expected = self.ref.pick(self.now, want)
            assert got == (None if expected is None else (self.gid(expected[0]), expected[1]))
            if expected is None:
                return
            group, q = expected
            assert q >= 1
            if self.ref.fifo(group):  # its oldest pending job is due, and it holds none
                oldest = min((j for j in self.ref.of(group, PENDING)), key=lambda j: j.seq)
                assert oldest.due_ms <= self.now and self.ref.held(group) == 0
            n = min(q, self.ref.claimable(group, self.now))
            self.ref.serve(group, n, self.now)
            self.dispatch.served(self.gid(group), n, self.ref.head(group, self.now), self.now)
            self.ref.refresh(self.now)
            self.grew.add(group)
            limit = self.ref.settings.limit_of(group)
            assert limit is None or self.ref.held(group) <= limit
            want -= n

    @rule(data=st.data(), how=st.sampled_from(["complete", "release", "retry", "dead"]),
          delay=st.sampled_from([1, 100, 400]))
    def settle_claimed(self, data: st.DataObject, how: str, delay: int) -> None:
        claimed = [j for j in self.ref.jobs if j.status == CLAIMED]
        if not claimed:
            return
        job = data.draw(st.sampled_from(claimed))
        if how == "complete":
            self.settle(job, DONE)
        elif how == "release":
            self.settle(job, PENDING, self.now)
        elif how == "retry":
            self.settle(job, PENDING, self.now + delay)
        else:
            self.settle(job, DEAD)

    @rule(data=st.data(), redrive=st.booleans())
    def dead_job(self, data: st.DataObject, redrive: bool) -> None:
        dead = [j for j in self.ref.jobs if j.status == DEAD]
        if not dead:
            return
        job = data.draw(st.sampled_from(dead))
        job.status, job.due_ms = (PENDING, self.now) if redrive else (DONE, job.due_ms)
        self.head_changed(job.group)

    @rule(data=st.data())
    def cancel_pending(self, data: st.DataObject) -> None:
        pending = [j for j in self.ref.jobs if j.status == PENDING]
        if not pending:
            return
        job = data.draw(st.sampled_from(pending))
        job.status = DONE
        self.head_changed(job.group)

    @rule(dt=st.sampled_from([0, 1, 10, 60, 250, 1_000]), sweep=st.booleans())
    def tick(self, dt: int, sweep: bool) -> None:
        self.now += dt
        if sweep:
            self.dispatch.sweep(self.now)
        for group in GROUPS:  # the caller's promote_due: fair heads change as jobs fall due
            gid = self.names.find(group)
            view = None if gid is None else self.dispatch.view(gid)
            head = self.ref.head(group, self.now)
            if (None if view is None else view.head) != head:
                self.head_changed(group)
        self.dispatch.advance(self.now)  # (then the wake-ups, as a pick does first)
        self.ref.refresh(self.now)
        self.release_names()

    @initialize(limit=limits, fifo=st.booleans(), hold=st.booleans(),
                rate=st.sampled_from([0.0, 0.0, 0.5, 3.0]))
    def start(self, limit: int | None, fifo: bool, hold: bool, rate: float) -> None:
        """Start under random settings (fifo with dead hold is otherwise a rare state)."""
        self.configure(limit, {}, {}, fifo, hold, rate, 0)

    @rule(limit=limits, overrides=st.dictionaries(named, limits, max_size=3),
          weights=st.dictionaries(named, st.integers(1, 4), max_size=3),
          fifo=st.booleans(), hold=st.booleans(),
          rate=st.sampled_from([0.0, 0.0, 0.5, 3.0, 20.0]), burst=st.sampled_from([0, 1, 4]))
    def configure(self, limit: int | None, overrides: dict[str, int | None],
                  weights: dict[str, int], fifo: bool, hold: bool, rate: float,
                  burst: int) -> None:
        if fifo:  # (a limit above 1 is refused with fifo)
            limit = None if limit is None else min(limit, 1)
            overrides = {g: 1 if v is None else min(v, 1) for g, v in overrides.items()}
        new = parse_group_settings({
            "group_limit": limit, "group_limits": overrides, "group_weights": weights,
            "group_order": "fifo" if fifo else "fair", "group_dead": "hold" if hold else "skip",
            "group_rate_per_s": rate, "group_burst": burst}, "configure")
        order_changed = new.order != self.ref.settings.order
        self.ref.reconfigure(new, self.now)
        heads = None
        if order_changed:
            heads = {self.gid(g): self.ref.head(g, self.now) for g in self.ref.live_groups()}
        self.dispatch.reconfigure(new, self.now, heads)
        self.ref.refresh(self.now)
        self.grew.clear()

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def every_group_is_as_the_reference_says(self) -> None:
        ref, now = self.ref, self.now
        for group in GROUPS:
            gid = self.names.find(group)
            view = None if gid is None else self.dispatch.view(gid)
            state, wake = ref.state(group, now)
            if view is None:
                assert state == EMPTY and ref.held(group) == 0 and ref.dead(group) == 0
                assert group not in ref.passes
                continue
            assert (view.state, view.wake_ms) == (state, wake), group
            assert view.held == ref.held(group) and view.dead == ref.dead(group)
            assert view.head == ref.head(group, now)
            assert view.pass_ == ref.pass_of(group), group
            assert view.limit == ref.settings.limit_of(group)
            tokens = ref.tokens(group, now)
            buckets = self.dispatch.buckets
            if tokens is not None and buckets is not None:
                assert buckets.available(gid, now) == tokens

    @invariant()
    def the_pick_and_the_wakeup_are_the_references(self) -> None:
        for want in (1, 7):
            got = self.dispatch.pick(self.now, want)
            expected = self.ref.pick(self.now, want)
            assert got == (None if expected is None else (self.gid(expected[0]), expected[1]))
        assert self.dispatch.next_wakeup_ms() == self.ref.next_wakeup_ms(self.now)

    @invariant()
    def no_limit_is_exceeded_by_a_claim(self) -> None:
        for group in self.grew:
            limit = self.ref.settings.limit_of(group)
            assert limit is None or self.ref.held(group) <= limit

    @invariant()
    def a_fifo_group_holds_at_most_one_job(self) -> None:
        if self.ref.settings.fifo:
            for group in self.grew - {None}:
                assert self.ref.held(group) <= 1

    @invariant()
    def ready_groups_lag_their_priority_by_at_most_one_quantum(self) -> None:
        for group, head in self.ref.ready(self.now).items():
            vtime = self.ref.vtime.get(head.priority, 0)
            assert vtime <= self.ref.pass_of(group) <= vtime + QUANTUM * STRIDE

    @invariant()
    def ready_counts_match(self) -> None:
        ready = self.ref.ready(self.now)
        for p in {h.priority for h in ready.values()}:
            assert self.dispatch.ready_at(p) == sum(1 for h in ready.values() if h.priority == p)
        for group in ready:
            view = self.dispatch.view(self.gid(group))
            assert view is not None and view.state == READY


DispatchMachine.TestCase.settings = settings(
    max_examples=examples(200), stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDispatchMachine = DispatchMachine.TestCase
