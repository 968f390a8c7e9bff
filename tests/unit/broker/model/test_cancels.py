"""Cancel in the pure model (broker.model.cancels): a pending or delayed job is
cancelled at once, a claimed one marked until its worker's next call (or its
lease's end) ends it cancelled, never completed; unknown and finished jobs
change nothing; the object's bytes carry it all and read back, strictly.
A hypothesis state machine holds "archived as cancelled exactly once, never
completed" over random interleavings, takeovers and re-reads included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.errors import CorruptState
from broker.model import browse, views
from broker.model import transitions as T
from broker.model.cancels import segments_to_load
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.job_lines import archive_line, job_line, stored_dict
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    DropArchived,
    Fail,
    FailItem,
    Heartbeat,
    NewJob,
    Push,
    PushPayloads,
    Reclaim,
    Release,
    TakeOver,
)
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from broker.storage import FileStore
from broker.wire import CANCEL_REQUESTED, CANCELLED, CancelAnswer, ItemResult
from tests.support.inprocess import archive_lines, run, started, stored
from tests.support.states import new_queue, read_back

T0 = 1_767_225_600_000


def committed(state: QueueState, now: int, commit: str) -> tuple[QueueState, list[bytes]]:
    """Stamp and encode ``state`` as a commit; the state read back from its bytes
    (the broker's in-memory claim gate and segment windows carried) and the
    archive lines the commit calls for."""
    codec.stamp(state, "w", now, commit)
    lines = [archive_line(state.jobs[s]) for s in state.completed.get(state.seq, ())]
    back = read_back(codec.encode(state))
    back.claims, back.windows = state.claims, state.windows
    return back, lines


def pushed(n: int, **kw: Any) -> tuple[QueueState, list[str]]:
    state = new_queue(T0)
    ids = T.apply(state, Push(tuple(NewJob(b'{"n":%d}' % i, **kw) for i in range(n))), T0).ids
    return state, list(ids)


def test_a_pending_or_delayed_job_is_cancelled_at_once_and_archived_as_cancelled() -> None:
    state = new_queue(T0)
    a, b = T.apply(state, Push((NewJob(b'{"a":1}', key="k-a"),
                                NewJob(b"2", delay_ms=60_000))), T0).ids
    r = T.apply(state, Cancel((a, b)), T0 + 5)
    assert r.changed and r.view == [CancelAnswer(a, True, None, CANCELLED),
                                    CancelAnswer(b, True, None, CANCELLED)]
    assert T.apply(state, Claim("w", 5, 1000), T0 + 120_000).jobs == []  # never handed out
    back, lines = committed(state, T0 + 5, "c-1")
    archived = [orjson.loads(line) for line in lines]
    assert [(r["id"], r["status"], r["worker"], r["token"], r["result"]) for r in archived] == [
        (a, "cancelled", None, None, None), (b, "cancelled", None, None, None)]
    assert archived[0]["payload"] == {"a": 1} and "completed_at" not in archived[0]
    assert archived[0]["cancelled_at"] == "2026-01-01T00:00:00.005Z"
    assert back.counters.cancelled == 2 and back.counters.completed == 0
    stats = views.stats(back, T0 + 5)
    assert stats["counts"]["cancelled"] == 2 and stats["total"] == 0
    assert stats["cancelled_total"] == 2
    # its key stays in the dedup window: the same key answers the cancelled job's id
    assert T.apply(back, Push((NewJob(b"9", key="k-a"),)), T0 + 6).ids == [a]
    assert back.counters.enqueued == 2
    assert T.apply(back, DropArchived((1,)), T0 + 7).count == 2
    assert len(back.jobs) == 0
    later = T.apply(back, Cancel((a,)), T0 + 8)  # gone now: finished, nothing changes
    assert not later.changed and later.view[0].status == "finished"


def test_a_claimed_job_is_marked_and_its_next_heartbeat_ends_it_cancelled() -> None:
    state, [jid, other] = pushed(2)
    [held] = T.apply(state, Claim("w", 1, 10_000), T0).jobs
    r = T.apply(state, Cancel((jid,)), T0 + 1)
    assert r.view == [CancelAnswer(jid, True, None, CANCEL_REQUESTED)]
    assert state.jobs[1].status == "claimed" and state.jobs[1].cancel_ms == T0 + 1
    assert T.apply(state, Cancel((jid,)), T0 + 2).changed is False  # a repeat: same answer
    assert state.counters.cancelled == 1
    state, _ = committed(state, T0 + 2, "c-1")  # the mark is in the object
    assert views.stats(state, T0 + 2)["cancel_requested"] == 1
    [beat] = T.apply(state, Heartbeat((held.token,), 10_000), T0 + 3).items
    assert (beat.ok, beat.status) == (False, CANCELLED)
    state, [line] = committed(state, T0 + 3, "c-2")
    rec = orjson.loads(line)
    assert (rec["id"], rec["status"], rec["worker"], rec["attempts"]) == (jid, "cancelled", "w", 1)
    assert rec["token"] == held.token.rpartition("-")[0]
    # whatever the worker does next is answered cancelled, and records nothing
    [done] = T.apply(state, Complete((CompleteItem(held.token, b'"r"'),)), T0 + 4).items
    [failed] = T.apply(state, Fail((FailItem(held.token, "boom"),)), T0 + 4).items
    [again] = T.apply(state, Heartbeat((held.token,)), T0 + 4).items
    assert {(x.ok, x.status) for x in (done, failed, again)} == {(False, CANCELLED)}
    T.apply(state, DropArchived((2,)), T0 + 5)
    [done] = T.apply(state, Complete((CompleteItem(held.token, b'"r"'),)), T0 + 6).items
    assert (done.ok, done.status) == (False, CANCELLED)  # (the receipts remember it)
    counters = state.counters
    assert (counters.completed, counters.failed, counters.dead) == (0, 0, 0)
    assert state.jobs[2].status == "pending"
    assert views.stats(state, T0 + 6)["counts"]["pending"] == 1
    assert other == "j0000000002"


@pytest.mark.parametrize("how", ["complete", "fail", "release", "lease runs out"])
def test_a_marked_job_ends_cancelled_however_its_holder_lets_go(how: str) -> None:
    state, [jid] = pushed(1, max_attempts=1)
    [held] = T.apply(state, Claim("w", 1, 10_000, request="r-c-1"), T0).jobs
    T.apply(state, Cancel((jid,)), T0 + 1)
    if how == "complete":
        [answer] = T.apply(state, Complete((CompleteItem(held.token, b"1"),)), T0 + 2).items
        assert (answer.ok, answer.status) == (False, CANCELLED)
    elif how == "fail":  # its last attempt: not dead, not counted as a failure
        [answer] = T.apply(state, Fail((FailItem(held.token, "boom"),)), T0 + 2).items
        assert (answer.ok, answer.status) == (False, CANCELLED)
    elif how == "release":
        r = T.apply(state, Release((held.token,), "r-c-1"), T0 + 2)
        assert r.changed and r.count == 0  # not handed back: it ended
    else:
        assert T.apply(state, Reclaim(), T0 + 10_000).changed
    job = state.jobs[1]
    assert job.status == "cancelled" and job.result is None and job.last_error is None
    assert job.attempts == 1
    c = state.counters
    assert (c.completed, c.failed, c.dead, c.reclaimed, c.cancelled) == (0, 0, 0, 0, 1)
    _, [line] = committed(state, T0 + 10_000, "c-1")
    assert orjson.loads(line)["status"] == "cancelled"


def test_a_takeover_keeps_the_mark_and_gives_a_fresh_lease() -> None:
    state, [jid] = pushed(1)
    [held] = T.apply(state, Claim("w", 1, 5_000), T0).jobs
    T.apply(state, Cancel((jid,)), T0 + 1)
    state, _ = committed(state, T0 + 1, "c-1")
    T.apply(state, TakeOver("b-2", "http://b", 30_000), T0 + 60_000)  # long after its lease
    job = state.jobs[1]
    assert job.status == "claimed" and job.cancel_ms == T0 + 1
    assert job.lease_expires_ms == T0 + 60_000 + 5_000
    [beat] = T.apply(state, Heartbeat((held.token,)), T0 + 60_001).items
    assert beat.status == CANCELLED and state.jobs[1].status == "cancelled"


def test_unknown_and_finished_jobs_are_said_so_and_nothing_changes() -> None:
    state, ids = pushed(4, max_attempts=1)
    [a, b] = T.apply(state, Claim("w", 2, 10_000), T0).jobs
    T.apply(state, Complete((CompleteItem(a.token, b"1"),)), T0)
    T.apply(state, Fail((FailItem(b.token, "boom"),)), T0)  # dead
    T.apply(state, Cancel((ids[2],)), T0)  # cancelled already
    state, _ = committed(state, T0, "c-1")
    before = codec.encode(state)
    r = T.apply(state, Cancel((ids[0], ids[1], "j0000000099", "nonsense", ids[2])), T0 + 1)
    assert [(x.ok, x.status) for x in r.view] == [
        (False, "finished"), (False, "finished"), (False, "unknown"), (False, "unknown"),
        (True, CANCELLED)]
    assert "completed" in (r.view[0].reason or "") and "dead" in (r.view[1].reason or "")
    assert not r.changed and codec.encode(state) == before


def test_marked_and_cancelled_lines_read_back_to_the_same_bytes() -> None:
    state, [a, b, _] = pushed(3)
    T.apply(state, Claim("w", 1, 10_000), T0)
    T.apply(state, Cancel((a, b)), T0 + 1)
    codec.stamp(state, "w", T0 + 1, "c-1")
    data = codec.encode(state)
    raw = orjson.loads(data)
    marked, cancelled = raw["jobs"][0], raw["jobs"][1]
    assert marked["status"] == "claimed" and "cancel_requested_at" not in marked  # (the record's)
    [record] = raw["claims"]
    assert record["fence"] == marked["claim"] and record["cancel"][0][0] == 0
    assert record["cancel"][0][1].endswith("00.001Z")
    assert cancelled["status"] == "cancelled" and cancelled["commit"] == "c-1"
    assert raw["counters"]["cancelled"] == 2
    back = decode_state(data)
    assert codec.encode(back) == data
    assert back.jobs[1].cancel_ms == T0 + 1  # (read from the record)
    for job in back.jobs.values():  # the templates and the generic encoding agree
        assert job_line(job) == b",\n" + orjson.dumps(stored_dict(job))


def test_an_object_without_a_cancel_writes_no_cancel_fields() -> None:
    """A queue that never cancelled writes the bytes it wrote before (no counter,
    no field): the golden tests pin them; here, that the counter is left out."""
    state, _ = pushed(2)
    T.apply(state, Claim("w", 1, 10_000), T0)
    codec.stamp(state, "w", T0, "c-1")
    data = codec.encode(state)
    assert b"cancel" not in data


def _object_with_cancels() -> dict[str, Any]:
    state, [a, b] = pushed(2)
    T.apply(state, Claim("w", 1, 10_000), T0)
    T.apply(state, Cancel((a, b)), T0 + 1)
    codec.stamp(state, "w", T0 + 1, "c-1")
    raw: dict[str, Any] = orjson.loads(codec.encode(state))
    return raw


@pytest.mark.parametrize(("edit", "named"), [
    (lambda raw: raw["jobs"][0].update(cancel_requested_at="2026-01-01T00:00:00.001Z"),
     "cancel_requested_at"),  # (a claimed job's mark is its record's)
    (lambda raw: raw["claims"][0]["cancel"][0].__setitem__(1, 5), "cancel time"),
    (lambda raw: raw["claims"][0]["cancel"][0].__setitem__(1, "yesterday"), "yesterday"),
    (lambda raw: raw["claims"][0]["cancel"][0].__setitem__(0, 1), "cancel position"),
    (lambda raw: raw["claims"][0].update(cancel=[]), "cancel must be"),
    (lambda raw: raw["jobs"][1].pop("cancel_requested_at"), "cancel_requested_at"),
    (lambda raw: raw["jobs"][1].pop("commit"), "commit"),
    (lambda raw: raw["jobs"][1].pop("cancelled_at"), "cancelled_at"),
    (lambda raw: raw["jobs"][1].update(result=1), "result"),
    (lambda raw: raw["jobs"][1].update(status="dead"), "cancel_requested_at"),
    (lambda raw: raw["counters"].update(cancelled=1), "counters.cancelled"),
    (lambda raw: raw["counters"].pop("cancelled"), "counters.cancelled"),
    (lambda raw: raw["counters"].update(cancelled=-1), "counter cancelled"),
])
def test_decode_refuses_cancel_fields_where_they_do_not_belong(edit: Any, named: str) -> None:
    raw = _object_with_cancels()
    decode_state(orjson.dumps(raw))  # as written: fine
    edit(raw)
    with pytest.raises(CorruptState, match=named):
        decode_state(orjson.dumps(raw))


def test_an_object_with_a_cancel_carries_what_older_brokers_refuse() -> None:
    """A broker from before cancel must refuse such an object, not serve it
    without its marks: its decoder refuses unknown counters (as this one does),
    and every object holding a mark or a cancelled job has ``counters.cancelled``
    (checked on decode: an object without it is refused here too)."""
    raw = _object_with_cancels()
    assert raw["counters"]["cancelled"] == 2
    raw["counters"]["uncancelled"] = 1  # what an older broker sees "cancelled" as
    with pytest.raises(CorruptState, match="unknown counters"):
        decode_state(orjson.dumps(raw))


def test_a_bulk_pushed_job_kept_as_its_line_is_cancelled() -> None:
    state = new_queue(T0)
    ids = T.apply(state, PushPayloads((b"1", b"2", b"3")), T0).ids
    T.apply(state, Cancel((ids[1],)), T0)
    assert [j.id for j in T.apply(state, Claim("w", 5, 1000), T0).jobs] == [ids[0], ids[2]]


# -- random interleavings ---------------------------------------------------------------


class CancelMachine(RuleBasedStateMachine):
    """Push, claim, cancel, heartbeat, complete, fail, release, time passing, a
    re-read, a takeover and the archive's drop, in any order: a job whose cancel
    took is archived as cancelled exactly once and never completed; a job is
    archived at most once; a job archived as completed was never cancelled; a
    complete or fail repeated with a token that settled its job (before a cancel,
    maybe) answers as it first did and changes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.state = new_queue(T0)
        self.now = T0
        self.commits = 0
        self.ids: list[str] = []
        self.tokens: list[str] = []
        self.cancelled: set[str] = set()  # cancels that took
        self.settled: dict[tuple[str, str], ItemResult] = {}  # (token, how): its ok answer
        self.archive: list[tuple[str, str]] = []  # (id, status), every line written

    @rule(n=st.integers(1, 3), delay=st.sampled_from([0, 0, 5_000]))
    def push(self, n: int, delay: int) -> None:
        jobs = tuple(NewJob(b"%d" % len(self.ids), delay_ms=delay, max_attempts=2)
                     for _ in range(n))
        self.ids += T.apply(self.state, Push(jobs), self.now).ids

    @rule(n=st.integers(1, 3))
    def claim(self, n: int) -> None:
        self.tokens += [j.token for j in T.apply(self.state, Claim("w", n, 3_000),
                                                 self.now).jobs]

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        jid = data.draw(st.sampled_from([*self.ids, "j0000000999"]))
        job = self.state.job(jid)
        before = None if job is None else job.status
        [answer] = T.apply(self.state, Cancel((jid,)), self.now).view
        if before in ("pending", "claimed", "cancelled"):
            assert answer.ok
            self.cancelled.add(jid)
        else:
            assert not answer.ok

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), what=st.sampled_from(["heartbeat", "complete", "fail", "release"]))
    def settle(self, data: st.DataObject, what: str) -> None:
        token = data.draw(st.sampled_from(self.tokens))
        op = {"heartbeat": Heartbeat((token,)), "complete": Complete((CompleteItem(token),)),
              "fail": Fail((FailItem(token, "x"),)), "release": Release((token,))}[what]
        first = self.settled.get((token, what))
        before = None if first is None else self.snapshot()
        r = T.apply(self.state, op, self.now)
        for item in r.items:
            if first is not None:  # a repeat of a settlement that landed (before a cancel, maybe)
                assert item == first and not r.changed and self.snapshot() == before
            elif item.ok:
                assert token.rpartition("-")[0].rpartition(".")[0] not in self.cancelled
                if what in ("complete", "fail"):
                    self.settled[(token, what)] = item

    def snapshot(self) -> tuple[bytes, dict[int, list[int]]]:
        """What a call that changes nothing leaves as it was: the object's content
        and the commits awaiting their archive objects."""
        return codec.encode_full(self.state), {s: list(j) for s, j in self.state.completed.items()}

    @rule(dt=st.sampled_from([1, 1_000, 4_000]))
    def tick(self, dt: int) -> None:
        self.now += dt
        T.apply(self.state, Reclaim(), self.now)

    @rule(takeover=st.booleans())
    def commit(self, takeover: bool) -> None:
        """A commit lands, its archive object is written, a later one drops it;
        the state is read back from the bytes (and taken over, maybe)."""
        self.commits += 1
        codec.stamp(self.state, "w", self.now, f"c-{self.commits}")
        for seq in self.state.completed.get(self.state.seq, ()):
            rec = orjson.loads(archive_line(self.state.jobs[seq]))
            self.archive.append((rec["id"], rec["status"]))
        back = read_back(codec.encode(self.state))
        back.claims = self.state.claims
        self.state = back
        if takeover:
            T.apply(self.state, TakeOver(f"b-{self.commits}", "http://b", 30_000), self.now)
        T.apply(self.state, DropArchived(tuple(self.state.completed)), self.now)

    @invariant()
    def archived_once_and_cancelled_never_completed(self) -> None:
        ids = [jid for jid, _ in self.archive]
        assert len(ids) == len(set(ids))
        for jid, status in self.archive:
            assert (status == "cancelled") == (jid in self.cancelled)
        for job in self.state.jobs.peek():
            if job.id in self.cancelled:
                assert job.status in ("claimed", "cancelled") and job.cancel_ms is not None
            else:
                assert job.cancel_ms is None and job.status != "cancelled"


CancelMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestCancelMachine = CancelMachine.TestCase


# -- jobs still in segment objects ---------------------------------------------------------


def _segmented(n: int, load: int | None = None) -> tuple[QueueState, SegmentRef]:
    """A queue whose jobs 1..n are in one segment object, ``load`` of its lines
    loaded (all: None), as the broker loads them before a batch."""
    state = new_queue(T0)
    state.windows = SegmentWindows()
    payloads = [b'{"n":%d}' % seq for seq in range(1, n + 1)]
    data = encode_segment("q", 1, 0, T0, payloads, max_attempts=3)
    ref = SegmentRef(segment_key("q", segment_name(1, "0123abcd")), '"e1"', 1, n, 0, T0)
    state.counters.enqueued = n
    state.segment_refs.append(ref)
    lines = segment_lines(data, ref)
    state.windows.put(ref, 0, lines if load is None else lines[:load])
    return state, ref


def test_a_pending_job_in_a_segment_is_cancelled_at_once_the_ones_before_move_in() -> None:
    state, _ = _segmented(10)
    assert segments_to_load(state, ["j0000000004"]) == []  # (all loaded)
    r = T.apply(state, Cancel(("j0000000004",)), T0 + 1)
    assert r.changed and r.view == [CancelAnswer("j0000000004", True, None, CANCELLED)]
    assert sorted(state.jobs) == [1, 2, 3, 4] and state.segment_refs[0].taken == 4
    assert state.jobs[4].status == "cancelled"
    back, [line] = committed(state, T0 + 1, "c-1")  # the object decodes, the line archives
    assert orjson.loads(line)["id"] == "j0000000004"
    assert orjson.loads(line)["payload"] == {"n": 4}
    claimed = T.apply(back, Claim("w", 20, 60_000), T0 + 2).jobs
    assert claimed.ids == [f"j{seq:010d}" for seq in (1, 2, 3, 5, 6, 7, 8, 9, 10)]


def test_a_segment_job_whose_lines_are_not_loaded_is_answered_retry() -> None:
    state, ref = _segmented(10, load=2)
    assert segments_to_load(state, ["j0000000005", "j0000000001", "j0000000099"]) == [ref]
    r = T.apply(state, Cancel(("j0000000005",)), T0)
    assert [(a.ok, a.status) for a in r.view] == [(False, "retry")]
    assert state.jobs.get(5) is None and state.counters.cancelled == 0
    assert r.changed  # (the two loaded jobs before it moved into the head, pending)
    assert [state.jobs[s].status for s in (1, 2)] == ["pending", "pending"]
    committed(state, T0, "c-1")


def test_a_broker_cancels_a_job_of_a_segment_it_loads_for_the_cancel(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def main() -> None:
        first = await started(store, segment_push_jobs=5)
        ids = await first.push("q", [b'{"n":%d}' % i for i in range(12)])
        assert stored(store).segment_refs  # (the bulk push went into a segment)
        await first.stop(drain_s=5)
        broker = await started(store, segment_push_jobs=5)  # (nothing of it loaded)
        try:
            [answer] = await broker.cancel("q", [ids[7]])
            assert (answer.ok, answer.status) == (True, CANCELLED)
            jobs = await broker.claim("q", "w", 20, 60.0)
            assert [j.id for j in jobs] == ids[:7] + ids[8:]
            stats = await broker.stats("q")
            assert stats["cancelled_total"] == 1 and stats["counts"]["claimed"] == 11
        finally:
            await broker.stop(drain_s=5)
        assert [(r["id"], r["status"]) for r in archive_lines(store)] == [(ids[7], CANCELLED)]

    run(main())


def test_the_dashboard_summary_counts_cancelled_jobs_as_stats_does() -> None:
    """(broker.model.browse.summary: cancelled jobs await the archive, as completed
    ones: counted by status, not in the total nor the depth.)"""
    state, ids = pushed(6)
    T.apply(state, Claim("w", 2, 10_000), T0)
    T.apply(state, Cancel((ids[0], ids[3], ids[4])), T0 + 1)  # one marked, two cancelled
    full, quick = views.stats(state, T0 + 2), browse.summary(state, T0 + 2)
    assert quick["counts"] == full["counts"] and quick["counts"]["cancelled"] == 2
    assert quick["total"] == full["total"] == 4
    assert quick["counters"]["depth"] == 4 and quick["counters"]["cancelled"] == 3
