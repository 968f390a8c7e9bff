"""The pure queue core: unit tests and hypothesis invariants, no I/O."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.errors import InvalidRequest, PayloadTooLarge, QueueFull
from broker.model import codec, indexes, lifecycle
from broker.model import state as S
from broker.model import transitions as T
from broker.model.decode import decode_state
from broker.model.job import JOB_OVERHEAD_BYTES, Job, JobIds, job_id_for, seq_of, token_seq
from broker.model.lines import archive_line, job_line
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    DropArchived,
    Fail,
    FailItem,
    Heartbeat,
    LeasedJob,
    NewJob,
    Op,
    Purge,
    Push,
    PushPayloads,
    Reclaim,
    Redrive,
    Result,
    SetPaused,
    TakeOver,
)
from broker.model.tokens import NOT_VALID, stored_part
from broker.model.views import list_jobs, stats
from broker.wire import ItemResult
from tests.support.states import new_queue, read_back


def push(state: S.QueueState, now: int, *payloads: object, **kw: object) -> list[str]:
    jobs = tuple(NewJob(orjson.dumps(p), **kw) for p in payloads)  # type: ignore[arg-type]
    return T.apply(state, Push(jobs), now).ids


def claim(state: S.QueueState, now: int, n: int = 1, lease_ms: int = 10_000) -> list[LeasedJob]:
    return T.apply(state, Claim("w", n, lease_ms), now).jobs


def test_claim_order_priority_then_run_at_then_seq() -> None:
    st_ = new_queue(0)
    a, = push(st_, 0, "a")
    b, = push(st_, 0, "b", priority=5)
    c, = push(st_, 0, "c", delay_ms=100)
    d, = push(st_, 0, "d", priority=5)
    assert [j.id for j in claim(st_, 50, 10)] == [b, d, a]
    assert [j.id for j in claim(st_, 200, 10)] == [c]


def test_delayed_high_priority_job_does_not_block_runnable_ones() -> None:
    st_ = new_queue(0)
    push(st_, 0, "later", priority=9, delay_ms=1000)
    low, = push(st_, 0, "now")
    assert [j.id for j in claim(st_, 10)] == [low]


def test_fail_backs_off_then_dies_then_redrive() -> None:
    st_ = new_queue(0)
    st_.settings.backoff_base_s = 1.0
    jid, = push(st_, 0, "x", max_attempts=2)
    tok = claim(st_, 0)[0].token
    r = T.apply(st_, Fail((FailItem(tok, "boom"),)), 10)
    assert r.items[0].status == "pending"
    assert claim(st_, 500) == []  # backing off for 1 s
    job2 = claim(st_, 1010)
    assert job2[0].attempt == 2
    r = T.apply(st_, Fail((FailItem(job2[0].token, "boom again"),)), 1020)
    assert r.items[0].status == "dead"
    job = st_.job(jid)
    assert job is not None and job.status == "dead" and job.last_error == "boom again"
    assert T.apply(st_, Redrive(), 2000).count == 1
    assert claim(st_, 2000)[0].attempt == 1


def test_expired_lease_is_reclaimed_and_old_token_refused() -> None:
    st_ = new_queue(0)
    jid, = push(st_, 0, "x")
    old = claim(st_, 0, lease_ms=1000)[0].token
    assert T.apply(st_, Heartbeat((old,), 1000), 500).items[0].ok
    r = T.apply(st_, Reclaim(), 1600)
    job = st_.job(jid)
    assert r.ids == [jid] and job is not None and job.status == "pending"
    new = claim(st_, 1600)[0].token
    assert new != old
    assert not T.apply(st_, Heartbeat((old,), 1000), 1700).items[0].ok
    done = T.apply(st_, Complete((CompleteItem(old),)), 1700)
    assert not done.items[0].ok and st_.job(jid) is not None
    assert T.apply(st_, Complete((CompleteItem(new, b"1"),)), 1700).items[0].ok
    job = st_.job(jid)
    assert job is not None and job.status == "completed"  # until its archive object is written
    assert T.apply(st_, DropArchived((st_.seq + 1,)), 1800).count == 1
    assert st_.job(jid) is None


def test_token_is_dead_once_lease_passes_even_before_reclaim() -> None:
    st_ = new_queue(0)
    push(st_, 0, "x")
    tok = claim(st_, 0, lease_ms=1000)[0].token
    r = T.apply(st_, Complete((CompleteItem(tok),)), 1000)
    assert not r.items[0].ok and "expired" in (r.items[0].reason or "")


def test_idempotency_key_dedupes_within_window() -> None:
    st_ = new_queue(0)
    st_.settings.dedup_ttl_s = 10
    first = push(st_, 0, "a", key="k1")
    again = push(st_, 5, "b", key="k1")
    assert again == first and len(st_.jobs) == 1
    both = T.apply(st_, Push((NewJob(b"1", key="k2"), NewJob(b"2", key="k2"))), 6).ids
    assert both[0] == both[1] and len(st_.jobs) == 2
    later = push(st_, 20_000, "c", key="k1")  # window passed
    assert later != first


def test_bad_push_changes_nothing() -> None:
    st_ = new_queue(0)
    st_.settings.max_payload_bytes = 10
    before = codec.encode(st_)
    with pytest.raises(PayloadTooLarge):
        T.apply(st_, Push((NewJob(b"1"), NewJob(b'"' + b"x" * 20 + b'"'))), 0)
    with pytest.raises(InvalidRequest):
        T.apply(st_, Push((NewJob(b"1"), NewJob(b"2", delay_ms=-1))), 0)
    assert codec.encode(st_) == before and st_.counters.enqueued == 0


def test_bulk_push_across_segments_encodes_like_the_general_path() -> None:
    st_ = new_queue(0)
    push(st_, 0, *range(1000))  # the bulk push below starts inside a segment
    payloads = tuple(orjson.dumps({"i": i}) for i in range(2500))
    ids = T.apply(st_, PushPayloads(payloads), 1_700_000_000_123).ids
    assert ids == [job_id_for(seq) for seq in range(1001, 3501)]
    assert {seg: len(jobs) for seg, jobs in st_.seg_jobs.items()} == {
        0: 1023, 1: 1024, 2: 1024, 3: 429}
    data = codec.encode(st_)
    cached = {job.id: job._enc for job in st_.jobs.values()}
    for job in st_.jobs.values():
        job._enc = None  # the template path, from the job's fields
    assert {job.id: job_line(job) for job in st_.jobs.values()} == cached
    assert orjson.loads(data) == orjson.loads(codec.encode_full(st_))
    assert codec.encode(decode_state(data)) == data
    claimed = T.apply(st_, Claim("w", 3), 1_700_000_000_200).jobs
    assert [j.id for j in claimed] == ["j0000000001", "j0000000002", "j0000000003"]


def test_bulk_push_refuses_an_oversize_payload_whole() -> None:
    st_ = new_queue(0)
    st_.settings.max_payload_bytes = 10
    with pytest.raises(PayloadTooLarge):
        T.apply(st_, PushPayloads((b"1", b'"' + b"x" * 20 + b'"')), 0)
    assert not st_.jobs and st_.counters.enqueued == 0


def test_queue_full_refuses_whole_push() -> None:
    st_ = new_queue(0)
    st_.settings.max_state_bytes = 3 * JOB_OVERHEAD_BYTES
    push(st_, 0, 1, 2)
    with pytest.raises(QueueFull):
        T.apply(st_, Push((NewJob(b"3"), NewJob(b"4"))), 0)
    assert len(st_.jobs) == 2


def test_paused_queue_hands_out_nothing() -> None:
    st_ = new_queue(0)
    push(st_, 0, "x")
    T.apply(st_, SetPaused(True), 0)
    assert claim(st_, 0) == []
    T.apply(st_, SetPaused(False), 0)
    assert len(claim(st_, 0)) == 1


def test_takeover_grants_fresh_leases() -> None:
    st_ = new_queue(0)
    push(st_, 0, "x")
    tok = claim(st_, 0, lease_ms=1000)[0].token
    T.apply(st_, TakeOver("b2", "http://b2", 30_000), 900)
    assert T.apply(st_, Reclaim(), 1500).ids == []  # old expiry 1000 no longer counts
    assert T.apply(st_, Heartbeat((tok,), 1000), 1500).items[0].ok


def test_push_once_happens_at_most_once() -> None:
    st_ = new_queue(0)
    first = T.apply(st_, Push((NewJob(b"1"), NewJob(b"2")), once="write:a"), 0)
    assert len(first.ids) == 2 and not first.duplicate
    again = T.apply(st_, Push((NewJob(b"1"), NewJob(b"2")), once="write:a"), 5)
    assert again.duplicate and again.ids == [] and len(st_.jobs) == 2
    other = T.apply(st_, Push((NewJob(b"3"),), once="write:b"), 5)
    assert len(other.ids) == 1 and len(st_.jobs) == 3


def test_job_ids_and_seqs_map_one_to_one() -> None:
    for seq in (1, 5, 9_999_999_999, 10_000_000_000, 123_456_789_012):
        assert seq_of(job_id_for(seq)) == seq
        assert token_seq(f"{job_id_for(seq)}.17") == seq
    for bad in ("", "j", "j5", "j00000000005", "j01000000000", "x0000000005", "j000000000\u00b2",
                "j000000000a", "j-000000005", "0000000005"):
        assert seq_of(bad) is None, bad
    assert token_seq("no-dot") is None


def test_list_jobs_pages_after_an_id_padded_or_not() -> None:
    st_ = new_queue(0)
    ids = T.apply(st_, PushPayloads(tuple(b"%d" % n for n in range(5))), 0).ids
    assert [j.id for j in list_jobs(st_, after=ids[1])] == list(ids[2:])
    assert [j.id for j in list_jobs(st_, after="j3")] == list(ids[3:])
    for bad in ("x3", "j", "j-1", "j\u00b2"):
        with pytest.raises(InvalidRequest):
            list_jobs(st_, after=bad)


def test_job_ids_of_a_bulk_push_read_like_a_list() -> None:
    ids = JobIds(9_999_999_998, 3)
    expected = ["j9999999998", "j9999999999", "j10000000000"]
    assert len(ids) == 3 and list(ids) == expected and ids == expected and expected == ids
    assert ids[-1] == expected[-1] and ids[1:] == expected[1:] and ids != expected[:2]
    with pytest.raises(IndexError):
        ids[3]


def test_corrupt_foreign_and_newer_objects_are_refused() -> None:
    from broker.errors import CorruptState, ForeignState, NewerState

    good = new_queue(0)
    T.apply(good, Push((NewJob(b"1", priority=5), NewJob(b"2"))), 0)
    T.apply(good, Claim("w", 1, 1000), 0)
    codec.stamp(good, "w", 0)
    text = codec.encode(good)
    decode_state(text)
    for bad in (text.replace(b'"j0000000001"', b'"j0000000003"'),  # id is not its seq's
                text.replace(b'"j0000000001"', b'"x\\"y"'),
                text.replace(b'"token":"j0000000001.1"', b'"token":"t\\"1"'),
                text.replace(b'"priority":5', b'"priority":1000001'),
                text.replace(b'"run_at":"1970', b'"run_at":"1969')):
        assert bad != text
        with pytest.raises(CorruptState):
            decode_state(bad)

    with pytest.raises(CorruptState):
        decode_state(b"{not json")
    with pytest.raises(CorruptState):
        decode_state(b'{"format":"osqueue","version":1,"seq":1}')
    with pytest.raises(ForeignState):
        decode_state(b'{"format":"other","version":1}')
    with pytest.raises(NewerState):
        decode_state(b'{"format":"osqueue","version":99}')


# -- invariants over random operation sequences ---------------------------------------

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
                expected = {k: v for k, v in job.to_plain().items()
                            if k not in ("lease", "key")}
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
            assert fresh == b",\n" + orjson.dumps(job.to_dict())
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
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueMachine = QueueMachine.TestCase
