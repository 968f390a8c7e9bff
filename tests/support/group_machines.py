"""What the hypothesis state machines of grouped claims share (broker.model.segments.grouped
through broker.model.transitions): :class:`GroupClaimsMachine` (the queue, its
segment windows, the tokens claims answered; completions, failures, releases and
takeovers) and :class:`RatedGroupClaims` on top of it (fifo heads, dead holds and
a model token bucket per group; reclaims, redrives, purges of dead jobs, cancels
of pending jobs, and the checks of one claim).

Run by tests/unit/broker/model/segments/test_grouped_machine.py,
test_grouped_machine_fifo.py and tests/unit/broker/model/groups/test_sweep_machine.py:
each keeps its own pushes, claims, settings changes and invariants (and so its own
groups and strategies); the rules here are the same in all of them."""

from __future__ import annotations

from typing import Any, NamedTuple

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from broker.model import ops
from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.groups.counts import held_by_group
from broker.model.groups.directories import group_major
from broker.model.groups.settings import GroupSettings, parse_group_settings
from broker.model.job import CLAIMED, DEAD, PENDING, Job
from broker.model.ratelimit import TokenBucket, effective_burst
from broker.model.segments.refs import is_taken
from broker.model.state import SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import QUEUE, committed, new_queue

T0 = 1_767_225_600_000
LEASE_MS = 5_000


class Pending(NamedTuple):
    """A pending job as the models see it (inline or in a segment)."""

    seq: int
    group: str | None
    priority: int
    run_at_ms: int


class GroupClaimsMachine(RuleBasedStateMachine):
    """A queue configured with ``configure`` at ``T0``; its segments' lines kept in
    windows ("loaded" when written, again after a takeover); the tokens claims
    answered (some stale since). Rules: complete, fail, release a live lease;
    take the queue over (the head encoded, decoded, taken over)."""

    def __init__(self, configure: dict[str, Any]) -> None:
        super().__init__()
        self.now = T0
        self.state = new_queue(T0)
        T.apply(self.state, ops.Configure(configure), T0)
        self.windows = SegmentWindows()
        self.state.windows = self.windows
        self.seg_groups: dict[int, list[str | None]] = {}  # first seq -> group a position
        self.tokens: list[str] = []
        self.owner = 0

    # -- helpers -------------------------------------------------------------------

    def settings(self) -> GroupSettings:
        return parse_group_settings(self.state.settings.groups, "t")

    def held(self) -> dict[str | None, int]:
        """Each group's claimed jobs, rebuilt from the head's claim records."""
        return held_by_group(self.state.claim_records.values(), self.state.jobs)

    def live(self) -> list[str]:
        """The tokens still leasing their job (the stale ones dropped)."""
        state, out = self.state, []
        assert state.tagger is not None
        for token in self.tokens:
            job = state.jobs.get(int(token[1:11]))
            if job is not None and job.status == CLAIMED and job.lease_token is not None \
                    and state.tagger.tag(job.lease_token) == token:
                out.append(token)
        self.tokens = out
        return out

    def claimed(self, n: int) -> tuple[list[Any], list[Job], dict[str | None, int]]:
        """One claim of ``n`` jobs (their tokens kept): the jobs answered, the jobs
        claimed in the head, how many each group got."""
        out = list(T.apply(self.state, ops.Claim("w", n, LEASE_MS), self.now).jobs)
        self.tokens += [job.token for job in out]
        jobs = [self.state.jobs[int(job.id[1:])] for job in out]
        got: dict[str | None, int] = {}
        for job in jobs:
            got[job.group] = got.get(job.group, 0) + 1
        return out, jobs, got

    def push_jobs(self, jobs: list[tuple[str | None, int, int, int | None]]) -> list[str]:
        """An inline push of (group, priority, delay in s, max attempts) jobs; their ids."""
        return list(T.apply(self.state, ops.Push(tuple(
            ops.NewJob(b"%d" % i, priority=p, delay_ms=d * 1000, group=g, max_attempts=m)
            for i, (g, p, d, m) in enumerate(jobs))), self.now).ids)

    def push_segment_of(self, groups: list[str | None], max_attempts: int) -> int:
        """A push by reference: seqs reserved, the segment "written" (group-major,
        format 3 if a job has a group), its ref pushed, its lines loaded; its
        first seq."""
        state = self.state
        first: int = T.apply(state, ops.Reserve(len(groups), 8), self.now).ids.first
        gm = group_major([b"%d" % (100 + i) for i in range(len(groups))], groups)
        data = encode_segment(QUEUE, first, 0, self.now, gm.payloads,
                              max_attempts=max_attempts, groups=gm.runs)
        ref = SegmentRef(segment_key(QUEUE, segment_name(first, "0123abcd")), f'"e{first}"',
                         first, len(groups), 0, self.now,
                         groups=None if gm.runs is None else len(gm.runs))
        T.apply(state, ops.PushPayloads((), refs=(ref,)), self.now)
        lines = segment_lines(data, ref)
        if gm.runs is None:
            self.windows.put(ref, 0, lines)
        else:
            self.windows.put_grouped(ref, lines, gm.runs)
        self.seg_groups[first] = [group for group, k in gm.runs or [(None, len(groups))]
                                  for _ in range(k)]
        return first

    def take_over(self) -> None:
        """Another broker takes the queue over, a millisecond later."""
        self.now += 1
        self.state = committed(self.state, self.now)
        self.state.windows = self.windows  # (the new owner loads the segments again)
        self.owner += 1
        T.apply(self.state, ops.TakeOver(f"b-{self.owner}", "http://b", 30_000), self.now)

    def assert_held_counts(self, groups: list[str | None]) -> None:
        """The broker's held count of each of ``groups`` equals the claim records'."""
        state = self.state.groups
        if state is not None:
            held = self.held()
            for group in groups:
                assert state.held(group) == held.get(group, 0), (group, held)

    def completed_one(self, seq: int) -> None:
        """Job ``seq`` was completed (for a machine that counts them)."""

    # -- rules -----------------------------------------------------------------------

    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        live = self.live()
        if live:
            token = data.draw(st.sampled_from(live))
            done = T.apply(self.state, ops.Complete((ops.CompleteItem(token),)), self.now)
            assert done.items[0].ok
            self.completed_one(int(token[1:11]))

    @rule(data=st.data(), retry=st.sampled_from([0, 1_000]))
    def fail(self, data: st.DataObject, retry: int) -> None:
        live = self.live()
        if live:
            token = data.draw(st.sampled_from(live))
            T.apply(self.state, ops.Fail((ops.FailItem(token, "boom", retry_in_ms=retry),)),
                    self.now)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        live = self.live()
        if live:
            T.apply(self.state, ops.Release((data.draw(st.sampled_from(live)),)), self.now)

    @rule()
    def takeover(self) -> None:
        self.take_over()


class RatedGroupClaims(GroupClaimsMachine):
    """:class:`GroupClaimsMachine` with fifo heads, dead holds and per-group rates:
    a model token bucket per group (a missing one is full), kept across rebuilds
    of the broker's group structures, capped by a new rate, dropped by a rate of
    0 or a takeover. Rules besides: reclaims, redrives, purges of dead jobs,
    cancels of pending jobs."""

    def __init__(self, configure: dict[str, Any]) -> None:
        super().__init__(configure)
        self.buckets: dict[str, TokenBucket] = {}

    # -- helpers -------------------------------------------------------------------

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
        its oldest pending one if due (its group holding none and, dead held, no
        dead job); fair (and no group), its due pending ones."""
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

    def rerate(self, rate: float, burst: int) -> None:
        """The model's buckets under a new rate, as GroupBuckets.reconfigure: a
        bucket short of full keeps its whole tokens, up to the new size."""
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

    def checked_claim(self, n: int) -> tuple[list[Any], list[Job], GroupSettings]:
        """One claim of ``n`` jobs, each checked: its group's claimable job (as
        :meth:`heads` had them before), no group past its limit, in fifo order one
        a group and only if it held none, within its group's bucket. The jobs
        answered, the jobs claimed in the head, the settings claimed under."""
        s, before, heads = self.settings(), self.held(), self.heads()
        out, jobs, got = self.claimed(n)
        for job in jobs:
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
        return out, jobs, s

    def take_over(self) -> None:
        super().take_over()
        self.buckets = {}  # (a broker taking over starts every bucket full)

    def removed(self, seqs: set[int]) -> None:
        """Jobs ``seqs`` were cancelled or purged (for a machine that counts them)."""

    # -- rules -----------------------------------------------------------------------

    @rule(ms=st.sampled_from([1, 400, 1_000, 2_500, LEASE_MS + 1]))
    def reclaim(self, ms: int) -> None:
        self.now += ms
        T.apply(self.state, ops.Reclaim(), self.now)

    @rule()
    def redrive(self) -> None:
        T.apply(self.state, ops.Redrive(), self.now)

    @rule()
    def purge_dead(self) -> None:
        dead = {j.seq for j in self.state.jobs.values() if j.status == DEAD}
        T.apply(self.state, ops.Purge((DEAD,)), self.now)
        self.removed(dead)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        pending = self.pending()
        if pending:
            seq = data.draw(st.sampled_from(sorted(p.seq for p in pending)))
            [answer] = T.apply(self.state, ops.Cancel((f"j{seq:010d}",)), self.now).view
            assert answer.ok
            self.removed({seq})
