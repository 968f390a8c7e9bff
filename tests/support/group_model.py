"""A plain O(n) reference of group dispatch (broker.model.groups.dispatch), for
the hypothesis state machine: a list of jobs, per-group passes, per-priority
virtual times and one ``ratelimit.TokenBucket`` per group, and every answer
computed by scanning them, from the rules as docs/groups.md states them:

- a group's head: fair order (and no group): its best due pending job by
  (priority desc, run-at, seq), else its earliest pending one; fifo order: its
  smallest-seq pending job, due or not;
- its state, first match wins: no head -> empty; held >= limit -> at_limit;
  fifo + group_dead "hold" + a dead job -> dead_held; head not due -> not_due;
  no whole token -> no_tokens; else ready;
- pick: among ready groups, the least (priority desc, pass, head's order key);
  it may take ``min(QUANTUM, ceil(want / ready at its priority), limit - held,
  tokens)`` jobs;
- serving n jobs: ``vtime[p] = max(vtime[p], pass)``, ``pass += n * (STRIDE //
  weight)``, n tokens taken; after every step a ready group's pass is
  ``max(pass, vtime[p])``; a group without pending, held or dead jobs
  forgets its pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.model.groups.dispatch import (
    AT_LIMIT,
    DEAD_HELD,
    EMPTY,
    NO_TOKENS,
    NOT_DUE,
    QUANTUM,
    READY,
    STRIDE,
    Head,
)
from broker.model.groups.settings import GroupSettings
from broker.model.indexes import ready_key
from broker.model.ratelimit import TokenBucket, effective_burst

PENDING, CLAIMED, DEAD, DONE = "pending", "claimed", "dead", "done"


@dataclass
class RefJob:
    seq: int
    group: str | None
    priority: int
    due_ms: int
    status: str = PENDING


@dataclass
class ReferenceQueue:
    settings: GroupSettings
    jobs: list[RefJob] = field(default_factory=list)
    passes: dict[str | None, int] = field(default_factory=dict)
    vtime: dict[int, int] = field(default_factory=dict)
    buckets: dict[str, TokenBucket] = field(default_factory=dict)  # a missing one is full

    # -- jobs ----------------------------------------------------------------------

    def push(self, group: str | None, priority: int, due_ms: int) -> RefJob:
        job = RefJob(len(self.jobs) + 1, group, priority, due_ms)
        self.jobs.append(job)
        return job

    def of(self, group: str | None, status: str) -> list[RefJob]:
        return [j for j in self.jobs if j.group == group and j.status == status]

    def live_groups(self) -> set[str | None]:
        return {j.group for j in self.jobs if j.status != DONE}

    def held(self, group: str | None) -> int:
        return len(self.of(group, CLAIMED))

    def dead(self, group: str | None) -> int:
        return len(self.of(group, DEAD))

    def fifo(self, group: str | None) -> bool:
        return group is not None and self.settings.fifo

    def head_job(self, group: str | None, now_ms: int) -> RefJob | None:
        pending = self.of(group, PENDING)
        if not pending:
            return None
        if self.fifo(group):
            return min(pending, key=lambda j: j.seq)
        due = [j for j in pending if j.due_ms <= now_ms]
        if due:
            return min(due, key=lambda j: (-j.priority, j.due_ms, j.seq))
        return min(pending, key=lambda j: (j.due_ms, -j.priority, j.seq))

    def head(self, group: str | None, now_ms: int) -> Head | None:
        job = self.head_job(group, now_ms)
        if job is None:
            return None
        order = job.seq if self.fifo(group) else ready_key(job.priority, job.due_ms, job.seq)
        return Head(job.priority, order, job.due_ms)

    # -- rates ---------------------------------------------------------------------

    def rate(self) -> tuple[float, int] | None:
        s = self.settings
        return None if not s.rate_per_s > 0 else (s.rate_per_s, effective_burst(s.rate_per_s,
                                                                                 s.burst))

    def tokens(self, group: str | None, now_ms: int) -> int | None:
        rate = self.rate()
        if rate is None or group is None:
            return None
        bucket = self.buckets.get(group)
        return rate[1] if bucket is None else bucket.available(now_ms)

    def next_token_ms(self, group: str, now_ms: int) -> int | None:
        bucket = self.buckets.get(group)
        return now_ms if bucket is None else bucket.next_token_ms(now_ms)

    # -- dispatch --------------------------------------------------------------------

    def state(self, group: str | None, now_ms: int) -> tuple[str, int | None]:
        """The group's state and, if it is parked until a time, that time."""
        head = self.head(group, now_ms)
        if head is None:
            return EMPTY, None
        limit = self.settings.limit_of(group)
        if limit is not None and self.held(group) >= limit:
            return AT_LIMIT, None
        if group is not None and self.dead(group) and self.settings.holds_dead:
            return DEAD_HELD, None
        if head.due_ms > now_ms:
            return NOT_DUE, head.due_ms
        tokens = self.tokens(group, now_ms)
        if tokens is not None and tokens < 1:
            assert group is not None
            return NO_TOKENS, self.next_token_ms(group, now_ms)
        return READY, None

    def ready(self, now_ms: int) -> dict[str | None, Head]:
        out = {}
        for group in self.live_groups():
            head = self.head(group, now_ms)
            if self.state(group, now_ms)[0] == READY and head is not None:
                out[group] = head
        return out

    def refresh(self, now_ms: int) -> None:
        """After every step: ready groups catch up with their priority's virtual
        time; groups with nothing left forget their pass."""
        live = self.live_groups()
        for group in list(self.passes):
            if group not in live:
                del self.passes[group]
        for group, head in self.ready(now_ms).items():
            self.passes[group] = max(self.passes.get(group, 0), self.vtime.get(head.priority, 0))

    def pass_of(self, group: str | None) -> int:
        return self.passes.get(group, 0)

    def pick(self, now_ms: int, want: int) -> tuple[str | None, int] | None:
        ready = self.ready(now_ms)
        if not ready:
            return None
        group = min(ready, key=lambda g: (-ready[g].priority, self.pass_of(g), ready[g].order))
        p = ready[group].priority
        at_p = sum(1 for h in ready.values() if h.priority == p)
        q = min(QUANTUM, max(1, -(-want // at_p)))
        limit = self.settings.limit_of(group)
        if limit is not None:
            q = min(q, limit - self.held(group))
        tokens = self.tokens(group, now_ms)
        if tokens is not None:
            q = min(q, tokens)
        return group, q

    def serve(self, group: str | None, n: int, now_ms: int) -> list[RefJob]:
        """Claim ``n`` jobs of the picked ``group``: its head and the next due
        ones of the head's priority, in its order; their vtime, pass and tokens."""
        head = self.head_job(group, now_ms)
        assert head is not None
        if self.fifo(group):
            taken = [head][:n]
        else:
            due = sorted((j for j in self.of(group, PENDING)
                          if j.due_ms <= now_ms and j.priority == head.priority),
                         key=lambda j: (j.due_ms, j.seq))
            taken = due[:n]
        assert len(taken) == n
        p = head.priority
        self.vtime[p] = max(self.vtime.get(p, 0), self.pass_of(group))
        self.passes[group] = self.pass_of(group) + n * (STRIDE // self.settings.weight_of(group))
        rate = self.rate()
        if rate is not None and group is not None:
            bucket = self.buckets.setdefault(group, TokenBucket(rate[0], rate[1], now_ms))
            assert bucket.take(n, now_ms) == n
        for job in taken:
            job.status = CLAIMED
        return taken

    def claimable(self, group: str | None, now_ms: int) -> int:
        """How many jobs :meth:`serve` could take of ``group`` at once."""
        head = self.head_job(group, now_ms)
        if head is None:
            return 0
        if self.fifo(group):
            return 1
        return sum(1 for j in self.of(group, PENDING)
                   if j.due_ms <= now_ms and j.priority == head.priority)

    def reconfigure(self, settings: GroupSettings, now_ms: int) -> None:
        old = self.rate()
        self.settings = settings
        new = self.rate()
        if new is None:
            self.buckets = {}
        elif old is not None and new != old:  # whole tokens kept, up to the new size
            for group, bucket in list(self.buckets.items()):
                whole = bucket.available(now_ms)
                fresh = TokenBucket(new[0], new[1], now_ms)
                if whole < old[1]:  # (a full bucket stays full, at the new size)
                    fresh.take(new[1] - min(new[1], whole), now_ms)
                self.buckets[group] = fresh

    def next_wakeup_ms(self, now_ms: int) -> int | None:
        wakes = [at for g in self.live_groups()
                 for state, at in [self.state(g, now_ms)] if at is not None]
        return min(wakes, default=None)
