"""Automatic failover between real broker processes on one store.

Brokers run as child processes (``python -m broker``) on a file store with a
short broker lease; clients are given every broker's URL. The nemesis is a
real signal: ``SIGKILL`` of the owner, or ``SIGSTOP`` for longer than its
lease followed by ``SIGCONT``.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.errors import NotTheBroker
from broker.model.format import archive
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually

LEASE_S = 2.0

pytestmark = pytest.mark.slow


class Pushers:
    """Threads pushing unique payloads through a client of every broker; every
    acknowledgement is recorded (the id and its payload: an id answered twice stays
    twice), and when each call succeeded."""

    def __init__(self, urls: list[str], store_url: str, threads: int = 3) -> None:
        self.acked: list[tuple[str, int]] = []
        self.successes: list[tuple[float, float]] = []  # (call began, answered)
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n, urls, store_url))
                         for n in range(threads)]

    def _run(self, n: int, urls: list[str], store_url: str) -> None:
        client = QueueClient(urls, "shared", store=store_url, timeout_s=5, retry_s=60)
        i = 0
        while not self._stop.is_set():
            value = n * 1_000_000 + i
            began = time.monotonic()
            try:
                [jid] = client.push_many([{"v": value}])
            except BaseException as exc:
                self.errors.append(exc)
                return
            with self._lock:
                self.acked.append((jid, value))
                self.successes.append((began, time.monotonic()))
            i += 1

    def __enter__(self) -> Pushers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(90)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_for_more(self, n: int, what: str) -> None:
        target = self.count() + n
        eventually(lambda: self.count() >= target or self.errors, 60, what)
        assert not self.errors, self.errors

    def first_success_after(self, t: float) -> float:
        """When the first call that began after ``t`` succeeded."""
        with self._lock:
            return min(end for began, end in self.successes if began > t)


@pytest.fixture()
def brokers(tmp_path: Path) -> Iterator[tuple[str, list[BrokerProcess]]]:
    store_url = f"file://{tmp_path}"
    procs = [BrokerProcess(store_url, "--lease-s", str(LEASE_S)).start() for _ in range(2)]
    try:
        yield store_url, procs
    finally:
        for p in procs:
            if p.proc is not None and p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
                p.stop(signal.SIGKILL)


def owner_url(tmp_path: Path) -> str | None:
    state = decode_state(FileStore(tmp_path).read(paths.state_key("shared")).data)
    return state.broker.url if state.broker is not None else None


def check_store(tmp_path: Path, acked: list[tuple[str, int]]) -> None:
    """Every acknowledged push is in the store exactly once, under its own id;
    nothing else is."""
    store = FileStore(tmp_path)
    state = decode_state(store.read(paths.state_key("shared")).data)
    stored = [(job.id, orjson.loads(job.payload)["v"]) for job in state.jobs.values()]
    assert len(archive.list_objects(store, "shared")) == 0
    ids = [jid for jid, _ in acked]
    assert len(set(ids)) == len(ids), f"ids answered twice: {len(ids) - len(set(ids))}"
    assert len(stored) == len(acked)
    assert sorted(stored) == sorted(acked)


def pause_outside_its_lock(proc: subprocess.Popen[bytes], tmp_path: Path,
                           pushers: Pushers) -> None:
    """``SIGSTOP`` the owner ``proc`` at a moment it does not hold the queue
    object's lock. A pause inside it (a few system calls of each commit) holds
    every other writer of the file store off until the owner wakes
    (broker/storage/files.py), so no takeover could happen: then it is woken,
    left to commit again, and paused again."""
    path = tmp_path / paths.state_key("shared")
    lock = path.parent / f".{path.name}.lock"
    for _ in range(5):
        proc.send_signal(signal.SIGSTOP)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return  # (closing the descriptor releases the probe's lock)
        except BlockingIOError:
            proc.send_signal(signal.SIGCONT)
        finally:
            os.close(fd)
        pushers.wait_for_more(10, "pushes after a pause that held the lock")
    raise AssertionError("the owner held its lock at each of 5 pauses")


def test_a_killed_owner_is_replaced_within_its_lease(
        tmp_path: Path, brokers: tuple[str, list[BrokerProcess]]) -> None:
    store_url, procs = brokers
    urls = [p.url for p in procs]
    with Pushers(urls, store_url) as pushers:
        pushers.wait_for_more(100, "pushes before the kill")
        owner = next(p for p in procs if p.url == owner_url(tmp_path))
        killed_at = time.monotonic()
        owner.stop(signal.SIGKILL)
        pushers.wait_for_more(100, "pushes after the kill")
        outage = pushers.first_success_after(killed_at) - killed_at
    assert not pushers.errors
    assert owner_url(tmp_path) != owner.url
    # on one machine the survivor sees the owner's process is gone at once;
    # either way no longer than the broker lease plus a few seconds
    print(f"outage after kill -9 of the owner: {outage:.2f}s (broker lease {LEASE_S}s)")
    assert outage < LEASE_S + 5, outage
    check_store(tmp_path, pushers.acked)


def test_a_paused_owner_is_replaced_and_steps_down_when_it_wakes(
        tmp_path: Path, brokers: tuple[str, list[BrokerProcess]]) -> None:
    store_url, procs = brokers
    urls = [p.url for p in procs]
    with Pushers(urls, store_url) as pushers:
        pushers.wait_for_more(100, "pushes before the pause")
        owner = next(p for p in procs if p.url == owner_url(tmp_path))
        other = next(p for p in procs if p is not owner)
        assert owner.proc is not None
        pause_outside_its_lock(owner.proc, tmp_path, pushers)
        try:
            eventually(lambda: owner_url(tmp_path) == other.url, 30,
                       "the other broker to take the queue over")
            pushers.wait_for_more(100, "pushes while the owner is paused")
        finally:
            owner.proc.send_signal(signal.SIGCONT)
        pushers.wait_for_more(100, "pushes after the owner woke up")
    assert not pushers.errors
    assert owner_url(tmp_path) == other.url
    with pytest.raises(NotTheBroker) as info:  # the woken broker writes nothing, and says who does
        QueueClient(owner.url, "shared", retry_s=0).push({"v": -1})
    assert info.value.details["url"] == other.url
    check_store(tmp_path, pushers.acked)
