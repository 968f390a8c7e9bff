"""Failure paths of the broker, one test per defect, through injected faults.

Every test drives real brokers (in this process) over a real file store
wrapped by :class:`tests.support.faults.FaultyStore`, then checks the store
itself: the queue object and the archive objects.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths, timefmt
from broker.errors import (
    CorruptState,
    InvalidRequest,
    NotTheBroker,
    OsqueueError,
    OutcomeUnknown,
    StorageRefused,
    StorageUnavailable,
    UnknownQueue,
)
from broker.model import state as S
from broker.model.format import archive
from broker.model.format.decode import decode_state
from broker.model.ops import ClearBroker, CompleteItem, FailItem, NewJob, Push, TakeOver
from broker.model.tokens import stored_part
from broker.storage import FileStore
from tests.support.direct import DirectQueue
from tests.support.faults import (
    EIO,
    ENOSPC,
    LATE,
    LOST_REPLY,
    LOST_REPLY_412,
    NOT_LANDED,
    REFUSED,
    Clock,
    FaultyStore,
)
from tests.support.inprocess import (
    archive_lines,
    crash,
    run,
    started,
    stored,
    successor,
    until,
)
from tests.support.pause import SkippedPause

# -- 1. an unknown outcome under a takeover ------------------------------------------


def test_completion_that_landed_under_a_takeover_is_answered_and_kept(tmp_path: Path) -> None:
    """Defect 1: A's complete lands, its reply is lost and another broker takes the
    queue over on top before A re-reads. A must neither undo nor deny it."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    def other_broker_takes_over(_key: str) -> None:
        DirectQueue(inner, "q", writer="b-other").apply(
            TakeOver("b-other", "http://b", 30_000))

    async def main() -> tuple[str, str]:
        a = await started(store)
        [jid] = await a.push("q", [NewJob(b'"x"')])
        [job] = await a.claim("q", "w1", 1, 30.0)
        store.inject("write_if_match", LOST_REPLY, key_contains="queue.json",
                     after=other_broker_takes_over)
        [answer] = await a.complete("q", [CompleteItem(job.token, b"1")])
        assert answer.ok and answer.status == "completed"  # it landed: say so
        with pytest.raises(NotTheBroker) as info:  # and A no longer serves the queue
            await a.push("q", [NewJob(b"2")])
        assert info.value.details["url"] == "http://b"
        await a.stop(drain_s=5)
        return jid, job.token

    jid, token = run(main())
    lines = [rec for rec in archive_lines(inner) if rec["id"] == jid]
    assert len(lines) == 1 and lines[0]["token"] == stored_part(token)
    assert lines[0]["worker"] == "w1"
    assert stored(inner).job(jid) is None  # archived, then dropped by the new owner's write
    assert not any(m == "delete" and "archive" in k for m, _, k in store.injected)


def test_push_with_an_unknowable_outcome_is_not_denied_and_its_retry_adds_nothing(
        tmp_path: Path) -> None:
    """Defect 1, second half: when A cannot tell whether its write landed (another
    broker wrote many versions on top), callers get OutcomeUnknown, and the
    client's retry of the push on the new owner returns the same ids."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    def other_broker_writes_a_lot(_key: str) -> None:
        other = DirectQueue(inner, "q", writer="b-other")
        other.apply(TakeOver("b-other", "http://b", 30_000))
        for i in range(S.LINEAGE + 2):  # more versions than the lineage remembers
            other.apply(Push((NewJob(orjson.dumps(f"other-{i}")),)))
        other.apply(ClearBroker("b-other"))  # then it stops cleanly

    async def main() -> list[str]:
        a = await started(store)
        await a.push("q", [NewJob(b'"first"')])
        store.inject("write_if_match", LOST_REPLY, key_contains="queue.json",
                     after=other_broker_writes_a_lot)
        with pytest.raises(OutcomeUnknown):
            await a.push("q", [NewJob(b'"mine"')], request="r-1")
        await a.stop(drain_s=5)
        b = await started(inner, url="http://b")
        again = await b.push("q", [NewJob(b'"mine"')], request="r-1")  # the client's retry
        await b.stop(drain_s=5)
        return again

    ids = run(main())
    state = stored(inner)
    mine = [j for j in state.jobs.values() if j.payload == b'"mine"']
    assert [j.id for j in mine] == ids  # exactly one job, the one the first push made


# -- 2. a late landing is recognised by the attempt's identity ----------------------


def test_a_write_that_lands_late_answers_its_own_results(tmp_path: Path) -> None:
    """Defect 2: attempt 1 times out, the loop re-applies the batch (after the
    lease ran out, so the retry would say "stale"), and attempt 1 lands late.
    The caller must get attempt 1's answer, and the completion must be kept."""
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> tuple[str, str]:
        a = await started(store, clock=clock)
        [jid] = await a.push("q", [NewJob(b'"x"')])
        [job] = await a.claim("q", "w1", 1, 10.0)
        store.inject("write_if_match", LATE, key_contains="queue.json")
        store.inject("read", None, key_contains="queue.json",
                     before=lambda _key: clock.advance(11))  # the re-apply sees an expired lease
        store.inject("write_if_match", None, key_contains="queue.json",
                     before=store.land_late)  # attempt 1 lands just before attempt 2
        [answer] = await a.complete("q", [CompleteItem(job.token, b"1")])
        assert answer.ok and answer.status == "completed", answer
        await a.stop(drain_s=5)
        return jid, job.token

    jid, token = run(main())
    lines = [rec for rec in archive_lines(inner) if rec["id"] == jid]
    assert [(rec["token"], rec["result"]) for rec in lines] == [(stored_part(token), 1)]


# -- 3. a takeover re-leases before it reclaims, whatever the clocks say -------------


@pytest.mark.parametrize("skew_s", [31.0, 3600.0])
def test_takeover_gives_claimed_jobs_fresh_leases_on_its_own_clock(
        tmp_path: Path, skew_s: float) -> None:
    """Defect 3: the new broker's clock is ahead of the old one's (or the outage
    outlasted every lease): claimed jobs keep their holders, with fresh leases."""
    clock_a = Clock()
    clock_b = Clock(clock_a.ms + round(skew_s * 1000))
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, "http://a", clock_a, lease_s=5.0)
        await a.push("q", [NewJob(b'"x"'), NewJob(b'"y"')])
        held = await a.claim("q", "w1", 2, 30.0)
        await crash(a)
        b = await started(store, "http://b", clock_b, lease_s=5.0)
        with pytest.raises(NotTheBroker):  # a's lease has not lapsed as far as b saw
            await b.push("q", [NewJob(b'"z"')])
        clock_b.advance(6)  # b watched for longer than a's broker lease
        await b.watch()
        stats = await b.stats("q")
        assert stats["served_by_this_broker"] and stats["reclaimed_total"] == 0
        assert stats["counts"]["claimed"] == 2
        for job in stored(store).jobs.values():
            assert job.lease is not None and job.lease.expires_ms == clock_b.ms + 30_000
        beats = await b.heartbeat("q", [j.token for j in held], 30.0)
        assert all(r.ok for r in beats)
        await b.stop(drain_s=5)

    run(main())


# -- 5 and 6. the object and the settings are checked -------------------------------


def test_decode_refuses_counters_below_what_the_object_holds(tmp_path: Path) -> None:
    """Defect 5: counters edited lower by hand would reuse ids and tokens."""
    store = FileStore(tmp_path)

    async def fill() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b"1"), NewJob(b"2")])
        await a.claim("q", "w", 1, 30.0)
        await a.stop(drain_s=5)

    run(fill())
    data = store.read(paths.state_key("q")).data
    head, nl, rest = data.partition(b"\n")  # (the counters are the header's)
    for field_, value in (("enqueued", 2), ("fence", 1)):
        assert f'"{field_}":{value}'.encode() in head
        edited = head.replace(f'"{field_}":{value}'.encode(), f'"{field_}":0'.encode()) + nl + rest
        with pytest.raises(CorruptState, match=f"counters.{field_}"):
            decode_state(edited)
        store.write_if_match(paths.state_key("q"), edited, store.read(paths.state_key("q")).etag)
        with pytest.raises(CorruptState):
            run(started(store, url="http://b"))
        store.write_if_match(paths.state_key("q"), data, store.read(paths.state_key("q")).etag)
    assert decode_state(store.read(paths.state_key("q")).data).counters.enqueued == 2


@pytest.mark.parametrize(("settings", "message"), [
    ({"backoff_base_s": 1e12}, "backoff_base_s"),
    ({"dedup_keys": 0.5}, "whole number"),
    ({"max_attempts": True}, "number"),
    ({"retry_ttl_s": float("nan")}, "number"),
    ({"max_state_bytes": 10}, "max_state_bytes"),
    ({"backoff_base_s": 100, "backoff_max_s": 10}, "must not exceed"),
    ({"colour": 1}, "unknown setting"),
])
def test_out_of_range_settings_are_refused_and_change_nothing(
        tmp_path: Path, settings: dict[str, Any], message: str) -> None:
    """Defect 6: unbounded settings made a queue unloadable or were silently truncated."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b"1")])
        before = store.read(paths.state_key("q")).data
        with pytest.raises(InvalidRequest, match=message):
            await a.create_queue("q", settings)
        assert store.read(paths.state_key("q")).data == before
        await a.stop(drain_s=5)

    run(main())


# -- 9, 11 and 19. nothing wedges a queue ------------------------------------------------


@pytest.mark.parametrize("kind", [ENOSPC, EIO])
def test_a_disk_error_is_answered_and_the_queue_recovers(tmp_path: Path, kind: str) -> None:
    """Defect 9: an OSError from the store ended the queue's commit loop for good."""
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        # (the failing batch's backoff skipped on a pause, counted against commit_timeout_s)
        a = await started(store, commit_timeout_s=1.0, pause=SkippedPause())
        await a.push("q", [NewJob(b"1")])
        await a.push("other", [NewJob(b"1")])
        store.inject("write_if_match", kind, key_contains="q/queue.json", times=None)
        with pytest.raises(OsqueueError) as info:
            await a.push("q", [NewJob(b"2")])
        assert info.value.retryable and info.value.code in ("storage_unavailable",
                                                            "outcome_unknown")
        assert a.health()["faulted_queues"] == ["q"]
        assert (await a.push("other", [NewJob(b"2")]))  # other queues keep serving
        store.heal()
        assert await a.push("q", [NewJob(b"3")])
        assert a.health()["ok"]
        await a.stop(drain_s=5)

    run(main())
    assert sorted(j.payload for j in stored(store.inner).jobs.values()) in (
        [b"1", b"3"], [b"1", b"2", b"3"])


def test_a_corrupt_object_appearing_at_run_time_is_answered_not_overwritten(
        tmp_path: Path) -> None:
    """Defect 9: a corrupt or foreign object found on a re-read wedged the queue."""
    inner = FileStore(tmp_path)

    async def main() -> None:
        a = await started(inner)
        await a.push("q", [NewJob(b"1")])
        good = inner.read(paths.state_key("q"))
        inner.write_if_match(paths.state_key("q"), b'{"format":"other"}', good.etag)
        with pytest.raises(OsqueueError) as info:  # the CAS fails, the re-read refuses
            await a.push("q", [NewJob(b"2")])
        assert info.value.code == "foreign_state"
        assert inner.read(paths.state_key("q")).data == b'{"format":"other"}'  # untouched
        assert a.health()["faulted_queues"] == ["q"]
        bad = inner.read(paths.state_key("q"))
        inner.write_if_match(paths.state_key("q"), good.data, bad.etag)  # an operator fixes it
        assert await a.push("q", [NewJob(b"3")])
        await a.stop(drain_s=5)

    run(main())


def test_a_permanent_storage_error_is_answered_at_once(tmp_path: Path) -> None:
    """Defect 19: a 403 was retried for ever as an unknown outcome."""
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, commit_timeout_s=30.0)
        await a.push("q", [NewJob(b"1")])
        store.inject("write_if_match", REFUSED, key_contains="queue.json", times=None)
        started_at = time.monotonic()
        with pytest.raises(StorageRefused):
            await a.push("q", [NewJob(b"2")])
        assert time.monotonic() - started_at < 5.0  # not the 30 s of a transient failure
        assert store.calls["write_if_match"] == 1  # one attempt: no retry
        await a.stop(drain_s=2)

    run(main())


def test_stop_returns_within_its_bound_while_storage_is_down(tmp_path: Path) -> None:
    """Defect 11: stop(drain_s) never returned while storage was down."""
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, commit_timeout_s=60.0)
        await a.push("q", [NewJob(b"1")])
        for method in ("write_if_match", "read", "put", "list", "delete", "head"):
            store.inject(method, NOT_LANDED, times=None)
        waiting = asyncio.create_task(a.push("q", [NewJob(b"2")]))

        def retrying() -> bool:  # its write failed and the loop tries to read it back
            methods = [m for m, _, key in store.injected if key.endswith("q/queue.json")]
            return "write_if_match" in methods and \
                "read" in methods[methods.index("write_if_match"):]

        await until(retrying)  # the push is in its retry loop now
        began = time.monotonic()
        await a.stop(drain_s=1.0)
        assert time.monotonic() - began < 4.0
        with pytest.raises(OsqueueError) as info:
            await waiting
        assert info.value.retryable

    run(main(), timeout_s=30)


# -- 12. takeover requests no longer carry another machine's clock ------------------


def test_a_dead_requesters_takeover_request_does_not_make_the_owner_yield(
        tmp_path: Path) -> None:
    """Defect 12: a takeover request stamped by a clock an hour ahead, from a
    requester that then died, made the owner yield for an hour."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b"1")])
        request = {"id": "b-gone", "url": "http://gone", "at_ms": timefmt.now_ms() + 3600_000}
        store.put("q/takeover.json", orjson.dumps(request))
        for _ in range(3):  # a few rounds of the broker's periodic checks
            await a.watch()
            await a.push("q", [NewJob(b"2")])
        assert (await a.stats("q"))["served_by_this_broker"]
        await a.stop(drain_s=5)

    run(main())


# -- 16. reads never move or create queues -------------------------------------------


def test_reads_on_a_standby_neither_move_nor_create_queues(tmp_path: Path) -> None:
    """Defect 16: a read on a standby took the queue from its healthy owner, and
    reads on unknown names created loops and metric series."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, "http://a")
        await a.push("q", [NewJob(b"1")])
        b = await started(store, "http://b")
        assert (await b.stats("q"))["total"] == 1  # answered from the stored object
        assert [j["payload"] for j in await b.jobs("q")] == [1]
        assert (await a.push("q", [NewJob(b"2")]))  # a still owns it
        assert stored(store).broker is not None and stored(store).broker.url == "http://a"
        for name in ("nope", "nope-2"):
            with pytest.raises(UnknownQueue):
                await b.stats(name)
            with pytest.raises(UnknownQueue):
                await b.jobs(name)
            with pytest.raises(UnknownQueue):
                await b.claim(name, "w", 1, 30.0)
            assert await b.claim(name, "w", 1, 30.0, wait_for_queue=True) == []
        assert set(b._queues) <= {"q"} and "nope" not in b.metrics.render()
        assert "nope" not in store.list("")[0] and not any("nope" in k for k in store.list(""))
        await b.stop(drain_s=5)
        await a.stop(drain_s=5)

    run(main())


# -- 17. a flaky store at start-up ------------------------------------------------------


@pytest.mark.parametrize("kind", [LOST_REPLY, LOST_REPLY_412])
def test_broker_starts_on_a_store_that_loses_a_probe_reply(tmp_path: Path, kind: str) -> None:
    """Defect 17: the self-test's conditional PUT landed, its reply was lost, the
    retry got 412, and the broker refused to start."""
    store = FaultyStore(FileStore(tmp_path))
    store.inject("create_if_absent", kind, key_contains="selftest")

    async def main() -> None:
        a = await started(store, self_test=True)
        await a.push("q", [NewJob(b"1")])
        await a.stop(drain_s=5)

    run(main())
    assert store.injected and not store.inner.list("_osqueue/")


# -- 18. no orphan archive objects ----------------------------------------------------


def test_a_failed_completing_write_leaves_no_orphan_archive_line(tmp_path: Path) -> None:
    """Defect 18: an archive object written before a commit that then failed (its
    undo lost too) made the job look completed twice."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    def foreign_push(_key: str) -> None:  # so the retry lands as another version
        DirectQueue(inner, "q", writer="tool").apply(Push((NewJob(b'"t"'),)))

    async def main() -> tuple[str, str]:
        a = await started(store)
        [jid] = await a.push("q", [NewJob(b'"x"')])
        [job] = await a.claim("q", "w1", 1, 30.0)
        store.inject("write_if_match", NOT_LANDED, key_contains="queue.json",
                     before=foreign_push)
        store.inject("delete", NOT_LANDED, key_contains="archive", times=None)
        [answer] = await a.complete("q", [CompleteItem(job.token, b"1")])
        assert answer.ok
        await a.stop(drain_s=5)
        return jid, job.token

    jid, token = run(main())
    lines = [rec for rec in archive_lines(inner) if rec["id"] == jid]
    assert [(rec["token"], rec["worker"]) for rec in lines] == [(stored_part(token), "w1")]
    assert [rec["id"] for rec in archive.read_all(inner, "q")].count(jid) == 1


# -- 21 and idempotent settlement --------------------------------------------------------


def test_repeated_calls_answer_as_the_first_did_even_on_another_broker(tmp_path: Path) -> None:
    """Deliver 2 and defect 21: a claim, complete or fail repeated after its answer
    was lost gets the first answer, from this broker or the next owner."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b"1"), NewJob(b"2"), NewJob(b"3")], request="p-1")
        first = await a.claim("q", "w", 2, 30.0, request="c-1")
        again = await a.claim("q", "w", 2, 30.0, request="c-1")
        assert [j.token for j in again] == [j.token for j in first]
        assert (await a.stats("q"))["counts"]["claimed"] == 2  # nothing stranded
        done = await a.complete("q", [CompleteItem(first[0].token, b"1")])
        failed = await a.fail("q", [FailItem(first[1].token, "boom")])
        await crash(a)
        b = await successor(store, Clock())
        assert await b.complete("q", [CompleteItem(first[0].token, b"1")]) == done
        assert await b.fail("q", [FailItem(first[1].token, "boom")]) == failed
        assert (await b.push("q", [NewJob(b"1"), NewJob(b"2"), NewJob(b"3")],
                             request="p-1")) == ["j0000000001", "j0000000002", "j0000000003"]
        # a complete of the failed token, or a fail of the completed one, stays refused
        [wrong] = await b.complete("q", [CompleteItem(first[1].token, b"1")])
        assert not wrong.ok
        assert (await b.stats("q"))["enqueued_total"] == 3  # no second copy of the push
        await b.stop(drain_s=5)

    run(main())


# -- 10. supported Python versions --------------------------------------------------------


def test_python_versions_the_project_claims_are_the_ones_it_runs_on() -> None:
    """Defect 10: pyproject allowed Python 3.10, where asyncio.wait_for raises
    asyncio.TimeoutError and the commit loop died at its first timer."""
    import tomllib

    root = Path(__file__).resolve().parents[4]
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert project["project"]["requires-python"] == ">=3.11"
    assert project["tool"]["ruff"]["target-version"] == "py311"
    assert "3.11" in (root / "Makefile").read_text()
    assert "3.10" not in (root / "README.md").read_text()


def test_storage_unavailable_and_outcome_unknown_are_distinct_and_retryable() -> None:
    for cls in (StorageUnavailable, OutcomeUnknown, NotTheBroker):
        assert cls("x").retryable
    assert not StorageRefused("x").retryable and not InvalidRequest("x").retryable
    assert OutcomeUnknown.code == "outcome_unknown" and OutcomeUnknown.status == 503
