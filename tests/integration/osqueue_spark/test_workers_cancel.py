"""Cancel seen from the consumers: ``process()`` (its worker loop, run without
Spark), the heartbeat thread and the stream reader stop on a cancelled job,
settle nothing for it and report it cancelled; the store ends with the job in
the archive as cancelled exactly once, never completed. The acceptance test
runs two real broker processes and kills the owner in the middle."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.storage import FileStore
from osqueue_spark import QueueClient, start_broker, workers
from osqueue_spark.datasource.options import StreamReadOptions
from osqueue_spark.datasource.stream_reader import QueueStreamReader
from osqueue_spark.heartbeat import Heartbeater
from osqueue_spark.workers import RESULT_COLUMNS, ProcessConfig, run_worker
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.inprocess import archive_lines, stored

LEASE_S = 0.6  # heartbeats every 0.2 s


def rows_of(fn: Any, cfg: ProcessConfig, client: QueueClient | None = None
            ) -> dict[str, dict[str, Any]]:
    return {r[0]: dict(zip(RESULT_COLUMNS, r, strict=True))
            for r in run_worker(fn, cfg, client)}


def archived(store: FileStore, queue: str) -> list[tuple[str, str]]:
    """(id, status) of every archive line written, once the queue object holds no
    finished job any more (every archive object written and its jobs dropped)."""
    def settled() -> bool:
        return all(j.status not in ("completed", "cancelled")
                   for j in stored(store, queue).jobs.values())

    eventually(settled, 30, "the archive objects written and their jobs dropped")
    return sorted((r["id"], r["status"]) for r in archive_lines(store, queue))


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[tuple[str, FileStore]]:
    with start_broker(f"file://{tmp_path}") as b:
        yield b.url, FileStore(tmp_path)


def test_process_reports_a_job_cancelled_while_fn_ran_and_never_completes_it(
        broker: tuple[str, FileStore]) -> None:
    url, store = broker
    client = QueueClient(url, "q")
    [jid, other] = client.push_many(["cancel me", "keep me"])

    def fn(payload: Any) -> Any:
        if payload == "cancel me":  # cancelled while it runs: its complete is refused
            assert client.cancel([jid])[0].status == "cancel_requested"
        return payload.upper()

    rows = rows_of(fn, ProcessConfig(url, "q", batch_size=2, lease_s=LEASE_S, idle_s=0))
    assert {i: r["status"] for i, r in rows.items()} == {jid: "cancelled", other: "completed"}
    assert archived(store, "q") == [(jid, "cancelled"), (other, "completed")]
    stats = client.stats()
    assert stats["completed_total"] == 1 and stats["failed_total"] == 0
    assert stats["cancelled_total"] == 1


class _Told(Heartbeater):
    """A heartbeat thread that says when a beat has found a job cancelled."""

    told = threading.Event()

    def beat(self) -> None:
        super().beat()
        if self.cancelled:
            _Told.told.set()


def test_process_does_not_start_a_job_its_heartbeat_found_cancelled(
        broker: tuple[str, FileStore], monkeypatch: pytest.MonkeyPatch) -> None:
    url, store = broker
    client = QueueClient(url, "q")
    [first, second] = client.push_many([1, 2])
    monkeypatch.setattr(workers, "Heartbeater", _Told)
    _Told.told.clear()
    ran: list[Any] = []

    def fn(payload: Any) -> Any:
        ran.append(payload)
        if payload == 1:  # the second job of the batch is cancelled while this one runs
            assert client.cancel([second])[0].status == "cancel_requested"
            assert _Told.told.wait(30), "no heartbeat was answered cancelled"
        return payload

    rows = rows_of(fn, ProcessConfig(url, "q", batch_size=2, lease_s=LEASE_S, idle_s=0))
    assert ran == [1]
    assert {i: r["status"] for i, r in rows.items()} == {first: "completed",
                                                         second: "cancelled"}
    assert rows[second]["result"] is None
    assert archived(store, "q") == [(first, "completed"), (second, "cancelled")]


def test_the_heartbeat_keeps_cancelled_tokens_apart_from_lost_ones(
        broker: tuple[str, FileStore]) -> None:
    url, _ = broker
    client = QueueClient(url, "q")
    client.push_many([1, 2])
    a, b = client.claim("w", 2, LEASE_S)
    client.cancel([a.id])
    with Heartbeater(client, 30.0) as hb:  # beats only when told to
        hb.add([a.token, b.token])
        hb.beat()
        assert hb.take_cancelled() == {a.token} and hb.take_lost() == set()
        assert hb.take_cancelled() == set()
        hb.beat()  # a cancelled token is not beaten again
    assert client.complete(b.token).ok


def test_the_stream_reader_drops_or_leaves_cancelled_jobs_and_completes_the_rest(
        broker: tuple[str, FileStore], caplog: pytest.LogCaptureFixture) -> None:
    url, store = broker
    client = QueueClient(url, "s")
    ids = client.push_many(list(range(6)))
    opts = StreamReadOptions.parse({"broker": url, "queue": "s", "leaseS": "1",
                                    "maxJobsPerTrigger": "3"})
    reader = QueueStreamReader(opts)
    caplog.set_level(logging.WARNING, "osqueue.spark")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        delivered = [row[0] for part in reader.partitions(start, end) for row in reader.read(part)]
        assert delivered == ids[:3]
        client.cancel([ids[1]])  # Spark has the row already: it is left uncompleted
        nxt = reader.latestOffset(end, None)  # completes the first batch, claims the next
        assert any("cancelled" in r.message for r in caplog.records)
        client.cancel([ids[4]])  # claimed, not yet planned: dropped from its batch
        hb = reader._hb
        assert hb is not None
        eventually(lambda: any(t.startswith(ids[4] + ".") for t in hb.cancelled), 30,
                   "the heartbeat to find it cancelled")
        assert reader.latestOffset(nxt, None) == nxt  # (drops it; nothing more to claim)
        rows = [row[0] for part in reader.partitions(end, nxt) for row in reader.read(part)]
        assert rows == [ids[3], ids[5]]
        reader.commit(nxt)
        reader.latestOffset(nxt, None)
    finally:
        reader.stop()
    assert archived(store, "s") == sorted(
        (i, "cancelled" if i in (ids[1], ids[4]) else "completed") for i in ids)


# -- acceptance: two broker processes, the owner killed in the middle --------------------


class _Held(Heartbeater):
    """A heartbeat thread whose beats go out only once ``open`` is set (so the
    old owner never hears one after the cancel: the new owner ends the job)."""

    open = threading.Event()

    def beat(self) -> None:
        if _Held.open.is_set():
            super().beat()


@pytest.mark.slow
@pytest.mark.parametrize("cancel", ["before the takeover", "after the takeover"])
def test_a_job_process_holds_ends_cancelled_once_through_a_takeover(
        tmp_path: Path, cancel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job ``process()`` holds is cancelled; the broker that owns the queue is
    killed (``SIGKILL``) in the middle, before or after the cancel; the other
    takes the queue over, answers the worker's next heartbeat ``cancelled``, and
    the worker reports the job cancelled. The store ends with the job archived
    as cancelled exactly once, no line completed, nothing failed."""
    store_url = f"file://{tmp_path}"
    store = FileStore(tmp_path)
    monkeypatch.setattr(workers, "Heartbeater", _Held)
    _Held.open.clear()
    procs = [BrokerProcess(store_url, "--lease-s", "1").start() for _ in range(2)]
    try:
        urls = ",".join(p.url for p in procs)
        client = QueueClient(urls, "q", store=store_url)
        [jid] = client.push_many([{"doc": 1}])
        owner = next(p for p in procs if stored(store).broker.url == p.url)  # type: ignore[union-attr]
        started, release = threading.Event(), threading.Event()

        def fn(payload: Any) -> Any:
            started.set()
            assert release.wait(120)
            return {"done": payload}

        rows: list[tuple[Any, ...]] = []
        cfg = ProcessConfig(urls, "q", batch_size=1, lease_s=1.5, idle_s=0.5)
        worker = threading.Thread(target=lambda: rows.extend(run_worker(fn, cfg)))
        worker.start()
        assert started.wait(60)
        if cancel == "before the takeover":
            assert client.cancel([jid])[0].status == "cancel_requested"
            owner.stop(signal.SIGKILL)
            job = stored(store).job(jid)  # what the killed owner left: marked, still held
            assert job is not None and job.status == "claimed" and job.cancel_ms is not None
        else:
            owner.stop(signal.SIGKILL)
            assert client.cancel([jid])[0].status == "cancel_requested"  # the new owner
        _Held.open.set()
        # the worker's heartbeat reaches the new owner, which ends the job cancelled
        eventually(lambda: (job := stored(store).job(jid)) is None or job.status == "cancelled",
                   60, "the job to end cancelled at the new owner")
        survivor = next(p for p in procs if p is not owner)
        assert stored(store).broker.url == survivor.url  # type: ignore[union-attr]
        release.set()
        worker.join(120)
        assert not worker.is_alive()
        assert [(r[0], r[1]) for r in rows] == [(jid, "cancelled")]
        assert archived(store, "q") == [(jid, "cancelled")]
        state = stored(store)
        assert (state.counters.completed, state.counters.failed) == (0, 0)
        assert state.counters.cancelled == 1 and len(state.jobs) == 0
    finally:
        for p in procs:
            p.stop(signal.SIGKILL)
