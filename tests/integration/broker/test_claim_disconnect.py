"""The claim route when its client goes away (broker.http.disconnect, the claim
handler of broker.http.routes, Broker.claim's ``gone``, Broker.release): a
long poll stops waiting, and a claim committed for a client that is no longer
there hands its jobs back, attempt not counted, its tokens stale."""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3

from broker import paths
from broker.http.app import App
from broker.model import tokens
from broker.model.format.decode import decode_state
from broker.model.ops import CompleteItem
from broker.model.state import QueueState
from broker.storage import FileStore, ObjectStore
from broker.storage.memory import MemoryStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.faults import (
    LATE,
    LOST_REPLY,
    LOST_REPLY_412,
    NOT_LANDED,
    Clock,
    FaultyStore,
)
from tests.support.inprocess import run, started, stored, until

TOKEN = "claim-disconnect-token"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("claim-disconnect-store")


@pytest.fixture(scope="module")
def broker_proc(store_dir: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(f"file://{store_dir}", "--token-env", "OSQ_TEST_TOKEN",
                       env={"OSQ_TEST_TOKEN": TOKEN}) as proc:
        yield proc


def _stored(store_dir: Path, queue: str) -> QueueState:
    return decode_state(FileStore(store_dir).read(paths.state_key(queue)).data)


def _claims_answered(url: str, queue: str) -> float:
    """How many claims on ``queue`` the broker has answered internally (its
    ``osqueue_ops_total`` counter): a long poll counts once it has looked for
    jobs and begun to wait."""
    text = urllib3.request("GET", f"{url}/metrics",
                           headers={"authorization": f"Bearer {TOKEN}"}).data.decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("osqueue_ops_total{") and 'op="claim"' in line
               and f'queue="{queue}"' in line)


def _open_long_poll(url: str, queue: str, wait_s: float, lease_s: float) -> socket.socket:
    """Send a claim over a raw socket and leave it waiting for its answer."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = orjson.dumps({"worker": "gone", "max_jobs": 1, "lease_s": lease_s,
                         "wait_s": wait_s})
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /v1/queues/%s/claim HTTP/1.1\r\nHost: x\r\n"
                 b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                 b"Idempotency-Key: r-gone-1\r\nContent-Length: %d\r\n\r\n%s"
                 % (queue.encode(), TOKEN.encode(), len(body), body))
    return sock


def test_a_long_poll_whose_client_closed_its_socket_leaves_the_next_job_to_others(
        broker_proc: BrokerProcess, store_dir: Path) -> None:
    """A claim long-polling with wait_s=20, lease_s=600 whose client closes its
    socket does not take the job pushed next: another worker's short long poll
    gets it, on its first attempt, and the store shows it claimed by that worker."""
    queue = f"q-{uuid.uuid4().hex[:10]}"
    client = QueueClient(broker_proc.url, queue, token=TOKEN, retry_s=10)
    client.create()
    sock = _open_long_poll(broker_proc.url, queue, wait_s=20, lease_s=600)
    eventually(lambda: _claims_answered(broker_proc.url, queue) >= 1, timeout_s=10,
               what="the long poll to begin waiting")
    sock.close()
    jid = client.push({"n": 1})
    got = client.claim("w2", lease_s=60, wait_s=5)
    assert [j.id for j in got] == [jid] and got[0].attempt == 1
    job = _stored(store_dir, queue).jobs[1]
    assert job.status == "claimed" and job.attempts == 1
    assert job.lease is not None and job.lease.worker == "w2"
    assert job.lease.token == tokens.stored_part(got[0].token)


# -- in-process: the ASGI app with a connection the test controls ----------------------


class Connection:
    """One request's ASGI ``receive`` and ``send``: the body, then nothing until the
    test makes the client leave (``http.disconnect``)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self._body: bytes | None = orjson.dumps(body)
        self.left = asyncio.Event()
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def leave_from_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.call_soon_threadsafe(self.left.set)

    @property
    def answer(self) -> Any:
        return orjson.loads(self.sent[-1]["body"])


def claim_call(app: App, conn: Connection, key: bytes | None = None) -> Awaitable[None]:
    """The app serving ``POST /v1/queues/q/claim`` on ``conn`` (``key``: its
    Idempotency-Key)."""
    headers = [(b"content-type", b"application/json")]
    if key is not None:
        headers.append((b"idempotency-key", key))
    scope = {"type": "http", "method": "POST", "path": "/v1/queues/q/claim", "headers": headers}
    return app(scope, conn.receive, conn.send)


LEASE_S = 600
CLAIM = {"worker": "gone", "max_jobs": 1, "lease_s": LEASE_S, "wait_s": 20}


def _claimed_token(store: ObjectStore) -> str | None:
    """The lease token of job 1 in the stored object, if it is claimed, as its
    claim answered it (tagged with the object's key)."""
    state = stored(store)
    job = state.jobs.get(1)
    if job is None or job.lease is None:
        return None
    return tokens.Tagger(bytes.fromhex(state.token_key), "q").tag(job.lease.token)


def test_a_waiting_claim_stops_when_its_client_leaves_and_takes_nothing_pushed_later() -> None:
    """The app's long poll returns as soon as the client's disconnect arrives,
    well before its wait_s, having claimed nothing; the job pushed afterwards
    stays pending until another worker claims it (its attempt 1)."""
    async def main() -> None:
        store = MemoryStore()
        broker = await started(store)
        try:
            await broker.create_queue("q")
            conn = Connection(CLAIM)
            call = asyncio.ensure_future(claim_call(App(broker), conn))
            await until(lambda: broker.metrics._ops[("q", "claim", "ok")] >= 1)
            conn.left.set()
            await asyncio.wait_for(call, 5)  # wait_s is 20
            assert conn.answer == {"jobs": []}
            jid = (await broker.push("q", [b'{"n":1}']))[0]
            job = stored(store).jobs[1]
            assert job.status == "pending" and job.attempts == 0
            got = await broker.claim("q", "w2", lease_s=60)
            assert [j.id for j in got] == [jid] and got[0].attempt == 1
        finally:
            await broker.stop()

    run(main())


def test_a_claim_committed_as_its_client_left_hands_its_job_back() -> None:
    """The client leaves while the claim's commit is being written: once it
    lands the job is released at once (one more commit), before the call ends.
    The store shows the job pending, attempt not counted, and the token the
    claim was leased is refused as stale."""
    async def main() -> None:
        store = FaultyStore(MemoryStore())
        broker = await started(store)
        try:
            await broker.push("q", [b'{"n":1}'])
            conn = Connection(CLAIM)
            loop = asyncio.get_running_loop()
            leased: list[str] = []

            def leave_once_leased(key: str) -> None:
                token = _claimed_token(store.inner)
                if token is not None and not leased:
                    leased.append(token)
                    conn.leave_from_thread(loop)

            store.inject("write_if_match", None, times=None, after=leave_once_leased)
            await asyncio.wait_for(claim_call(App(broker), conn), 5)
            assert leased and conn.answer == {"jobs": []}
            job = stored(store.inner).jobs[1]
            assert job.status == "pending" and job.attempts == 0 and job.lease is None
            assert len(stored(store.inner).jobs) == 1
            late = await broker.complete("q", [CompleteItem(leased[0])])
            assert not late[0].ok and late[0].reason is not None
            assert "stale" in late[0].reason
        finally:
            await broker.stop()

    run(main())


def test_a_keyed_claim_retried_after_its_release_answers_no_jobs_at_once() -> None:
    """The client's retry of a released claim (same Idempotency-Key) is answered
    at once with no jobs, well before its wait_s: the released token is never
    handed out, and the job waits, pending, for the next claim."""
    async def main() -> None:
        store = FaultyStore(MemoryStore())
        broker = await started(store)
        try:
            await broker.push("q", [b'{"n":1}'])
            app, conn = App(broker), Connection(CLAIM)
            loop = asyncio.get_running_loop()
            store.inject("write_if_match", None, times=None, after=lambda key: (
                conn.leave_from_thread(loop) if _claimed_token(store.inner) else None))
            await asyncio.wait_for(claim_call(app, conn, b"r-c1-1"), 5)
            store.heal()
            assert stored(store.inner).jobs[1].status == "pending"
            retry = Connection(CLAIM)
            await asyncio.wait_for(claim_call(app, retry, b"r-c1-1"), 5)  # wait_s is 20
            assert retry.answer == {"jobs": []}
            job = stored(store.inner).jobs[1]
            assert job.status == "pending" and job.attempts == 0
            got = await broker.claim("q", "w2", request="r-c2-1")
            assert got[0].attempt == 1
        finally:
            await broker.stop()

    run(main())


@pytest.mark.parametrize("fault", [NOT_LANDED, LOST_REPLY, LOST_REPLY_412, LATE])
def test_a_release_whose_write_fails_once_still_hands_the_job_back_once(fault: str) -> None:
    """The release's own write times out before landing, lands with its reply
    lost (or a 412 for the retry of a landed write), or lands late: the commit
    loop resolves it, and the store ends with the one job pending, attempt not
    counted, never released twice or lost."""
    async def main() -> None:
        store = FaultyStore(MemoryStore())
        broker = await started(store)
        try:
            await broker.push("q", [b'{"n":1}'])
            conn = Connection(CLAIM)
            _fault_the_release(store, conn, asyncio.get_running_loop(), fault, times=1)
            await asyncio.wait_for(claim_call(App(broker), conn), 10)
            store.land_late()
            assert conn.answer == {"jobs": []} and store.injected[-1][1] == fault
            state = stored(store.inner)
            assert len(state.jobs) == 1
            job = state.jobs[1]
            assert job.status == "pending" and job.attempts == 0 and job.lease is None
            got = await broker.claim("q", "w2", lease_s=60)
            assert got[0].attempt == 1
        finally:
            await broker.stop()

    run(main())


def test_a_release_that_cannot_be_written_leaves_the_job_to_its_lease(
        caplog: pytest.LogCaptureFixture) -> None:
    """Storage refuses every write of the release until the batch times out: the
    call ends, the failure is logged, and the job stays claimed under the gone
    client's lease (once in the store, not lost); when that lease expires it is
    reclaimed and another worker gets it (attempt 2: the lease ran out)."""
    async def main() -> None:
        clock = Clock()
        store = FaultyStore(MemoryStore())
        broker = await started(store, clock=clock, commit_timeout_s=0.3)
        try:
            await broker.push("q", [b'{"n":1}'])
            conn = Connection(CLAIM)
            _fault_the_release(store, conn, asyncio.get_running_loop(), NOT_LANDED, times=None)
            await asyncio.wait_for(claim_call(App(broker), conn), 10)
            store.heal()
            assert conn.answer == {"jobs": []}
            job = stored(store.inner).jobs[1]
            assert job.status == "claimed" and job.attempts == 1
            assert job.lease is not None and job.lease.worker == "gone"
            clock.advance(LEASE_S + 1)
            got = await broker.claim("q", "w2", lease_s=60)
            assert [j.id for j in got] == ["j0000000001"] and got[0].attempt == 2
            state = stored(store.inner)
            assert len(state.jobs) == 1 and state.jobs[1].lease is not None
            assert state.jobs[1].lease.worker == "w2"
        finally:
            await broker.stop()

    with caplog.at_level(logging.WARNING, logger="osqueue.http"):
        run(main())
    assert any("could not hand back" in r.getMessage() for r in caplog.records)


def _fault_the_release(store: FaultyStore, conn: Connection, loop: asyncio.AbstractEventLoop,
                       fault: str, times: int | None) -> None:
    """Once the claim's write lands, make the client leave and fault the writes
    after it (the release's): ``times`` of them, or all (None)."""
    def leave_once_leased(key: str) -> None:
        if _claimed_token(store.inner) is not None:
            store.heal()
            store.inject("write_if_match", fault, times=times)
            conn.leave_from_thread(loop)

    store.inject("write_if_match", None, times=None, after=leave_once_leased)
