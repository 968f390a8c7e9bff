"""The pure queue core under random operation sequences: a hypothesis state
machine over :func:`broker.model.transitions.apply`, checking after every step
that no job is lost or duplicated, that every status change is one the
lifecycle table allows, that the line templates match the generic encoding and
that views read without changing anything. No I/O."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.model import indexes, lifecycle
from broker.model import state as S
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import Job
from broker.model.job_lines import archive_line, job_line, stored_dict
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    DropArchived,
    Fail,
    FailItem,
    Heartbeat,
    NewJob,
    Op,
    Purge,
    Push,
    PushPayloads,
    Reclaim,
    Redrive,
    Result,
    SetPaused,
)
from broker.model.tokens import NOT_VALID, stored_part
from broker.model.views import stats
from broker.wire import ItemResult
from tests.support.states import new_queue, read_back
from tests.support.tiers import examples

payloads = st.one_of(st.integers(-(2**53), 2**53), st.text(max_size=8),
                     st.lists(st.integers(-9, 9), max_size=3),
                     st.dictionaries(st.text(max_size=3), st.booleans(), max_size=2))


def order_key(job: Job) -> tuple[int, int, int]:
    return (-job.priority, job.run_at_ms, job.seq)


def _lines(state: S.QueueState) -> dict[int, bytes]:
    """Every job's line by seq, read without making Jobs of the lines."""
    return {job.seq: job_line(job) for job in state.jobs.peek()}


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = new_queue(0)
        self.now = 0
        self.pushed: set[str] = set()
        self.completed: set[str] = set()
        self.archived: set[str] = set()
        self.purged: set[str] = set()
        self.tokens: list[str] = []
        self.keys: dict[str, str] = {}
        self.answers: dict[tuple[str, str], ItemResult] = {}  # (op, token) -> first ok answer
        self.requests: dict[str, list[str]] = {}  # push request key -> ids answered

    def apply(self, op: Op, now: int) -> Result:
        """T.apply, checking that every job's status change is one the table allows."""
        # (peek: reading must not turn the jobs a bulk push keeps as lines into Jobs)
        before = {job.seq: job.status for job in self.state.jobs.peek()}
        try:
            return T.apply(self.state, op, now)
        finally:
            after = {job.seq: job.status for job in self.state.jobs.peek()}
            for seq in before.keys() | after.keys():
                frm, to = before.get(seq, lifecycle.NEW), after.get(seq, lifecycle.GONE)
                assert frm == to or to in lifecycle.MOVES[frm], (type(op).__name__, frm, to)

    @rule(dt=st.integers(0, 3000))
    def tick(self, dt: int) -> None:
        self.now += dt

    @rule(items=st.lists(st.tuples(payloads, st.integers(-2, 2), st.integers(0, 2000),
                                   st.sampled_from([None, 1, 2, 3]),
                                   st.sampled_from([None, "a", "b", "c"])),
                         min_size=1, max_size=4))
    def push(self, items: list[tuple[object, int, int, int | None, str | None]]) -> None:
        jobs = tuple(NewJob(orjson.dumps(p), pr, d, m, k) for p, pr, d, m, k in items)
        ids = self.apply(Push(jobs), self.now).ids
        assert len(ids) == len(jobs)
        for (_, _, _, _, key), jid in zip(items, ids, strict=True):
            if key is not None:
                if key in self.keys and self.keys[key] != jid:
                    # only allowed once the key aged out of the window
                    assert key not in self.state.keys or self.state.keys[key].job_id == jid
                self.keys[key] = jid
        self.pushed.update(ids)

    @rule(items=st.lists(payloads, min_size=1, max_size=6),
          request=st.sampled_from([None, "r1", "r2", "r3"]))
    def push_bulk(self, items: list[object], request: str | None) -> None:
        before = len(self.state.jobs)
        ids = list(self.apply(PushPayloads(tuple(orjson.dumps(p) for p in items),
                                             request=request), self.now).ids)
        if request is not None and request in self.state.receipts.requests \
                and request in self.requests and len(self.state.jobs) == before:
            assert ids == self.requests[request]  # a repeat: the first answer, nothing new
            return
        assert len(ids) == len(items) and not self.pushed & set(ids)
        self.pushed.update(ids)
        if request is not None:
            self.requests[request] = ids

    @rule(n=st.integers(1, 4), lease=st.integers(1, 3000),
          worker=st.sampled_from(["w", 'w"2', "w\u00e9\\3"]))
    def claim(self, n: int, lease: int, worker: str) -> None:
        indexes.promote_due(self.state, self.now)
        runnable = sorted(
            (j for j in self.state.jobs.peek()
             if j.status == "pending" and j.run_at_ms <= self.now),
            key=order_key,
        )
        expected = [j.id for j in runnable[:n]] if not self.state.paused else []
        got = self.apply(Claim(worker, n, lease, request=f"c{len(self.tokens)}"),
                         self.now).jobs
        assert [j.id for j in got] == expected
        for j in got:
            self.tokens.append(j.token)
        if got:  # a repeat of the same claim hands back the same jobs, claiming nothing new
            again = self.apply(Claim(worker, n, lease,
                                       request=f"c{len(self.tokens) - len(got)}"),
                               self.now)
            assert again.replayed and [j.token for j in again.jobs] == [j.token for j in got]

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), lease=st.integers(1, 3000))
    def heartbeat(self, data: st.DataObject, lease: int) -> None:
        tok = data.draw(st.sampled_from(self.tokens))
        valid = T.live_job(self.state, stored_part(tok), self.now) is not None
        snapshot = _lines(self.state)
        r = self.apply(Heartbeat((tok,), lease), self.now)
        assert r.items[0].ok == valid
        if not valid:
            assert _lines(self.state) == snapshot

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        tok = data.draw(st.sampled_from(self.tokens))
        job = T.live_job(self.state, stored_part(tok), self.now)
        snapshot = _lines(self.state)
        r = self.apply(Complete((CompleteItem(tok, b"true"),)), self.now)
        first = self.answers.get(("complete", tok))
        if job is None:
            assert _lines(self.state) == snapshot
            if first is not None and tok in self._remembered():
                assert r.items[0] == first  # a repeat answers as the first call did
            elif first is None:
                assert not r.items[0].ok
        else:
            assert r.items[0].ok and r.items[0].status == "completed"
            assert job.status == "completed" and job.result == b"true"
            assert job.id not in self.completed
            self.completed.add(job.id)
            self.answers[("complete", tok)] = r.items[0]

    def _remembered(self) -> set[str]:
        """Tokens whose settlement the state still remembers (receipts, or the job)."""
        out = set()
        for tok in self.tokens:
            token = stored_part(tok)
            fence = int(token.rpartition(".")[2])
            job = self.state.job(token.rpartition(".")[0])
            if self.state.receipts.outcome(fence) is not None or (
                    job is not None and job.lease is not None and job.lease.token == token):
                out.add(tok)
        return out

    @rule()
    def archive_and_drop(self) -> None:
        """What the broker does after a commit: archive its completions, then drop them."""
        codec.stamp(self.state, "test", self.now, f"c-{self.now}")
        for job_seqs in list(self.state.completed.values()):
            for js in job_seqs:
                job = self.state.jobs[js]
                assert job.lease is not None
                # the archive line's template says what the generic record says
                # (less the error history: an archive line keeps last_error only)
                expected = {k: v for k, v in job.to_plain().items()
                            if k not in ("lease", "key", "errors")}
                expected.update(worker=job.lease.worker, token=job.lease.token)
                assert orjson.loads(archive_line(job)) == expected
                assert archive_line(job) == orjson.dumps(
                    {k: expected[k] for k in orjson.loads(archive_line(job))}) + b"\n"
                self.archived.add(job.id)
        seqs = tuple(self.state.completed)
        self.apply(DropArchived(seqs), self.now)
        assert not self.state.completed

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), retry=st.sampled_from([None, 0, 500]))
    def fail(self, data: st.DataObject, retry: int | None) -> None:
        tok = data.draw(st.sampled_from(self.tokens))
        job = T.live_job(self.state, stored_part(tok), self.now)
        r = self.apply(Fail((FailItem(tok, "err", retry),)), self.now)
        first = self.answers.get(("fail", tok))
        if job is not None:
            assert r.items[0].ok
            assert job.status == ("dead" if job.attempts >= job.max_attempts else "pending")
            assert r.items[0].status == job.status
            self.answers[("fail", tok)] = r.items[0]
        elif first is not None and tok in self._remembered():
            assert r.items[0] == first
        elif first is None:
            assert not r.items[0].ok

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), how=st.sampled_from(["digit", "queue", "bare"]))
    def forged(self, data: st.DataObject, how: str) -> None:
        """A token with one digit of its tag changed, one of another queue with the
        same stored part, or the stored part alone: refused by every call, as
        not valid for this queue, and nothing changes."""
        tok = data.draw(st.sampled_from(self.tokens))
        token, _, tag = tok.rpartition("-")
        if how == "digit":
            i = data.draw(st.integers(0, len(tag) - 1))
            forged = f"{token}-{tag[:i]}{'0' if tag[i] != '0' else '1'}{tag[i + 1:]}"
        elif how == "queue":
            forged = new_queue(queue="other").tagger.tag(token)  # type: ignore[union-attr]
        else:
            forged = token
        before = codec.encode(self.state)
        for op in (Heartbeat((forged,), 1000), Complete((CompleteItem(forged, b"1"),)),
                   Fail((FailItem(forged, "x"),))):
            r = self.apply(op, self.now)
            assert r.items[0] == ItemResult(forged, False, NOT_VALID) and not r.changed
        assert codec.encode(self.state) == before

    @rule()
    def reclaim(self) -> None:
        self.apply(Reclaim(), self.now)
        for job in self.state.jobs.peek():
            if job.status == "claimed":
                assert job.lease is not None and job.lease.expires_ms > self.now

    @rule()
    def read_every_job(self) -> None:
        """Make every job a Job (what a full scan does); nothing changes but the form."""
        before = codec.encode(self.state)
        assert all(isinstance(job, Job) for job in self.state.jobs.values())
        assert codec.encode(self.state) == before

    @rule()
    def redrive(self) -> None:
        self.apply(Redrive(), self.now)

    @rule(paused=st.booleans())
    def pause(self, paused: bool) -> None:
        self.apply(SetPaused(paused), self.now)

    @rule(statuses=st.sampled_from([("dead",), ("pending", "dead")]))
    def purge(self, statuses: tuple[str, ...]) -> None:
        doomed = {j.id for j in self.state.jobs.peek() if j.status in statuses}
        assert self.apply(Purge(statuses), self.now).count == len(doomed)
        self.purged |= doomed

    @rule()
    def roundtrip(self) -> None:
        codec.stamp(self.state, "test", self.now, f"c-{self.now}")
        data = codec.encode(self.state)
        back = read_back(data)
        assert codec.encode(back) == data
        assert codec.encode_full(back) == codec.encode_full(self.state)
        assert orjson.loads(data) == orjson.loads(codec.encode_full(self.state))
        # the parsed state behaves the same from here on
        self.state = back

    @invariant()
    def nothing_lost_or_duplicated(self) -> None:
        live = {j.id for j in self.state.jobs.peek() if j.status != "completed"}
        done = {j.id for j in self.state.jobs.peek() if j.status == "completed"}
        assert done | self.archived == self.completed and not done & self.archived
        assert not live & self.completed and not live & self.purged
        assert not self.completed & self.purged
        assert live | self.completed | self.purged == self.pushed
        assert len(self.pushed) == self.state.counters.enqueued

    @invariant()
    def templates_match_the_generic_encoding(self) -> None:
        for job in self.state.jobs.peek():
            cached = job._enc  # (a line spliced from another, or the job's own line)
            job._enc = None  # encode from the fields, whichever path that takes
            fresh = job_line(job)
            job._enc = cached
            assert fresh == b",\n" + orjson.dumps(stored_dict(job))
            assert cached is None or cached == fresh

    @invariant()
    def views_read_without_changing(self) -> None:
        table = self.state.jobs
        lines = {seq for seq, e in table.entries.items() if isinstance(e, bytes)}
        counts = self.state.count_by_status()
        assert counts == {s: sum(j.status == s for j in table.peek()) for s in counts}
        stats(self.state, self.now)
        assert {seq for seq, e in table.entries.items() if isinstance(e, bytes)} == lines

    @invariant()
    def attempts_bounded(self) -> None:
        for job in self.state.jobs.peek():
            assert 0 <= job.attempts <= job.max_attempts
            if job.status == "pending":
                assert job.attempts < job.max_attempts
            assert (job.status in ("claimed", "completed")) == (job.lease is not None)


QueueMachine.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueMachine = QueueMachine.TestCase
