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

from typing import Any, NamedTuple

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.counts import held_by_group
from broker.model.groups.directories import group_major
from broker.model.groups.settings import parse_group_settings
from broker.model.groups.sweep import release_unused
from broker.model.job import CLAIMED, DEAD, PENDING
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
    Reclaim,
    Redrive,
    Release,
    Reserve,
    TakeOver,
)
from broker.model.ratelimit import TokenBucket, effective_burst
from broker.model.segments.grouped import group_stats
from broker.model.segments.refs import is_taken
from broker.model.state import SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import QUEUE, committed, new_queue
from tests.support.tiers import examples

T0 = 1_767_225_600_000
LEASE_MS = 5_000
#: Few enough that ids are freed and taken again all the time.
GROUPS: list[str | None] = [None, *(f"g{i}" for i in range(6))]


class Pending(NamedTuple):
    seq: int
    group: str | None
    priority: int
    run_at_ms: int


class ReusedIds(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.state = new_queue(T0)
        T.apply(self.state, Configure({"group_limit": 1}), T0)
        self.windows = SegmentWindows()
        self.state.windows = self.windows
        self.seg_groups: dict[int, list[str | None]] = {}
        self.tokens: list[str] = []
        self.owner = 0
        self.buckets: dict[str, TokenBucket] = {}  # the model's (a missing one is full)
        self.pushed: set[int] = set()
        self.completed: list[int] = []
        self.gone: set[int] = set()  # cancelled or purged

    # -- helpers -------------------------------------------------------------------

    def settings(self) -> Any:
        return parse_group_settings(self.state.settings.groups, "t")

    def held(self) -> dict[str | None, int]:
        return held_by_group(self.state.claim_records.values(), self.state.jobs)

    def pending(self) -> list[Pending]:
        out = [Pending(j.seq, j.group, j.priority, j.run_at_ms)
               for j in self.state.jobs.values() if j.status == PENDING]
        for ref in self.state.segment_refs:
            for pos, group in enumerate(self.seg_groups[ref.first_seq]):
                if not is_taken(ref, pos):
                    out.append(Pending(ref.first_seq + pos, group, ref.priority, ref.run_at_ms))
        return out

    def dead(self, group: str | None) -> int:
        return sum(1 for j in self.state.jobs.values() if j.status == DEAD and j.group == group)

    def tokens_of(self, group: str | None) -> int | None:
        s = self.settings()
        if group is None or not s.rate_per_s > 0:
            return None
        bucket = self.buckets.get(group)
        return effective_burst(s.rate_per_s, s.burst) if bucket is None else \
            bucket.available(self.now)

    def heads(self) -> dict[str | None, list[Pending]]:
        """Each group's claimable jobs now (below its limit, with a token): fifo,
        its oldest pending one if due; fair (and no group), its due pending ones."""
        s, held, out = self.settings(), self.held(), {}
        by_group: dict[str | None, list[Pending]] = {}
        for p in self.pending():
            by_group.setdefault(p.group, []).append(p)
        for group, jobs in by_group.items():
            tokens = self.tokens_of(group)
            limit = s.limit_of(group)
            if (tokens is not None and tokens < 1) or (
                    limit is not None and held.get(group, 0) >= limit):
                continue
            if s.fifo and group is not None:
                head = min(jobs, key=lambda p: p.seq)
                if head.run_at_ms <= self.now and not held.get(group) and not (
                        s.holds_dead and self.dead(group)):
                    out[group] = [head]
            else:
                due = [p for p in jobs if p.run_at_ms <= self.now]
                if due:
                    out[group] = due
        return out

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

    def rerate(self, rate: float, burst: int) -> None:
        """The model's buckets under a new rate, as GroupBuckets.reconfigure."""
        s = self.settings()
        if not rate > 0:
            self.buckets = {}
            return
        size = effective_burst(rate, burst)
        if (rate, size) == (s.rate_per_s, effective_burst(s.rate_per_s, s.burst)) \
                or not s.rate_per_s > 0:
            return
        kept = {}
        for group, bucket in self.buckets.items():
            tokens = bucket.available(self.now)
            if tokens < bucket.burst and min(size, tokens) < size:
                fresh = TokenBucket(rate, size, self.now)
                fresh.take(size - tokens, self.now)
                kept[group] = fresh
        self.buckets = kept

    def claim_some(self, n: int) -> list[Any]:
        """One claim of ``n`` jobs, checked (see the module's docstring)."""
        s, before, heads = self.settings(), self.held(), self.heads()
        if self.state.groups is not None:
            self.state.groups.names.cap = 0  # (this claim sweeps the names first)
        out = list(T.apply(self.state, Claim("w", n, LEASE_MS), self.now).jobs)
        self.tokens += [job.token for job in out]
        jobs = [self.state.jobs[int(job.id[1:])] for job in out]
        assert len({job.seq for job in jobs}) == len(jobs)
        got: dict[str | None, int] = {}
        for job in jobs:
            got[job.group] = got.get(job.group, 0) + 1
            assert any(p.seq == job.seq for p in heads.get(job.group, ())), \
                (job.seq, job.group, heads.get(job.group))  # its group's claimable job
        for group, k in got.items():
            limit = s.limit_of(group)
            assert limit is None or before.get(group, 0) + k <= limit, (group, k, before)
            if group is None:
                continue
            if s.fifo:
                assert k == 1 and not before.get(group), (group, k, before)
            if s.rate_per_s > 0:
                bucket = self.buckets.setdefault(group, TokenBucket(
                    s.rate_per_s, effective_burst(s.rate_per_s, s.burst), self.now))
                assert bucket.take(k, self.now) == k, (group, k)  # within its bucket
        if len(out) < n:
            assert self.heads() == {}, "the claim stopped while a group was eligible"
        return out

    # -- rules -----------------------------------------------------------------------

    @rule(jobs=st.lists(st.tuples(st.sampled_from(GROUPS), st.integers(0, 1),
                                  st.sampled_from([0, 0, 0, 2]), st.integers(1, 2)),
                        min_size=1, max_size=6))
    def push(self, jobs: list[tuple[str | None, int, int, int]]) -> None:
        ids = T.apply(self.state, Push(tuple(
            NewJob(b"%d" % i, priority=p, delay_ms=d * 1000, group=g, max_attempts=m)
            for i, (g, p, d, m) in enumerate(jobs))), self.now).ids
        self.pushed.update(int(i[1:]) for i in ids)

    @rule(groups=st.lists(st.sampled_from(GROUPS[1:]), min_size=1, max_size=6))
    def push_segment(self, groups: list[str | None]) -> None:
        if len(self.seg_groups) >= 5:
            return
        state = self.state
        first = T.apply(state, Reserve(len(groups), 8), self.now).ids.first
        gm = group_major([b"%d" % (100 + i) for i in range(len(groups))], groups)
        assert gm.runs is not None
        data = encode_segment(QUEUE, first, 0, self.now, gm.payloads, max_attempts=2,
                              groups=gm.runs)
        ref = SegmentRef(segment_key(QUEUE, segment_name(first, "0123abcd")), f'"e{first}"',
                         first, len(groups), 0, self.now, groups=len(gm.runs))
        T.apply(state, PushPayloads((), refs=(ref,)), self.now)
        self.windows.put_grouped(ref, segment_lines(data, ref), gm.runs)
        self.seg_groups[first] = [g for g, k in gm.runs for _ in range(k)]
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

    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        live = self.live()
        if live:
            token = data.draw(st.sampled_from(live))
            assert T.apply(self.state, Complete((CompleteItem(token),)), self.now).items[0].ok
            self.completed.append(int(token[1:11]))

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

    @rule(ms=st.sampled_from([1, 400, 1_000, 2_500, LEASE_MS + 1]))
    def reclaim(self, ms: int) -> None:
        self.now += ms
        T.apply(self.state, Reclaim(), self.now)

    @rule()
    def redrive(self) -> None:
        T.apply(self.state, Redrive(), self.now)

    @rule()
    def purge_dead(self) -> None:
        dead = {j.seq for j in self.state.jobs.values() if j.status == DEAD}
        T.apply(self.state, Purge((DEAD,)), self.now)
        self.gone |= dead

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        pending = self.pending()
        if pending:
            seq = data.draw(st.sampled_from(sorted(p.seq for p in pending)))
            [answer] = T.apply(self.state, Cancel((f"j{seq:010d}",)), self.now).view
            assert answer.ok
            self.gone.add(seq)

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

    @rule()
    def takeover(self) -> None:
        self.now += 1
        self.state = committed(self.state, self.now)
        self.state.windows = self.windows
        self.owner += 1
        T.apply(self.state, TakeOver(f"b-{self.owner}", "http://b", 30_000), self.now)
        self.buckets = {}  # (a broker taking over starts every bucket full)

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def counts_equal_the_records_and_no_referenced_id_is_free(self) -> None:
        held = self.held()
        groups = self.state.groups
        if groups is None:
            return
        for group in GROUPS:
            assert groups.held(group) == held.get(group, 0), (group, held)
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
