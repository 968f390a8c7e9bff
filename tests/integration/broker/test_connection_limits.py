"""Idle or slow connections from one address cannot starve other clients
(broker.http.admission, broker.http.connections), on real sockets.

The attacker is ``127.0.0.2`` (a socket bound there before it connects; Linux
routes all of 127/8 to loopback), the worker ``127.0.0.1``. The acceptance
tests run a real broker process; the others a broker in a thread with small
limits, to look at which connection is closed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.http.server import BrokerServer
from broker.limits import BUSY_FIRST_BYTE_S
from broker.service.config import BrokerConfig
from broker.storage import FileStore
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.sockets import (
    GIVE_UP_S,
    Answer,
    ask,
    connect,
    raise_fd_limit,
    read_answer,
    request_bytes,
    until_closed,
)

TOKEN = "conn-limits-token-0123456789"
ATTACKER, WORKER = "127.0.0.2", "127.0.0.1"
IDLE = 1000


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def push_one(port: int, n: int) -> tuple[Answer, float]:
    """A worker's push on a new connection: its answer, and how long it took (s)."""
    start = time.monotonic()
    answer = ask(port, "POST", "/v1/queues/q/push", orjson.dumps({"jobs": [{"payload": n}]}),
                 source=WORKER, token=TOKEN)
    return answer, time.monotonic() - start


def p99(seconds: list[float]) -> float:
    return sorted(seconds)[int(len(seconds) * 0.99) - 1]


def pending_jobs(root: Path) -> int:
    state = orjson.loads(FileStore(root).read(paths.state_key("q")).data)
    return len(state["jobs"])


@pytest.fixture(params=["default share", "no share"])
def broker_proc(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """A broker with --max-connections 1000; one address may hold half of them (the
    default), or all of them (then only shedding at the limit makes room)."""
    raise_fd_limit(4 * IDLE)  # the broker process inherits it
    share = [] if request.param == "default share" else [
        "--max-connections-per-address", str(IDLE)]
    with BrokerProcess(f"file://{tmp_path}", "--token-env", "OSQ_CONN_TOKEN",
                       "--max-connections", str(IDLE), *share,
                       env={"OSQ_CONN_TOKEN": TOKEN}) as proc:
        yield proc


def test_a_thousand_idle_connections_from_one_address_leave_a_worker_answered(
        broker_proc: BrokerProcess, tmp_path: Path) -> None:
    """The acceptance test: 1,000 connections from 127.0.0.2 that send nothing, on a
    broker with --max-connections 1000; then 100 pushes from 127.0.0.1, each on a
    new connection: every one answered 200, p99 under 1 s, and all 100 jobs stored."""
    port = port_of(broker_proc.url)
    idle = [connect(port, ATTACKER) for _ in range(IDLE)]
    try:
        results = [push_one(port, n) for n in range(100)]
    finally:
        for sock in idle:
            sock.close()
    assert [a.status for a, _ in results] == [200] * 100, \
        [a for a, _ in results if a.status != 200][:3]
    assert p99([t for _, t in results]) < 1.0, sorted(t for _, t in results)[-5:]
    assert pending_jobs(tmp_path) == 100


def test_a_reconnect_storm_from_one_address_leaves_a_worker_answered(
        broker_proc: BrokerProcess, tmp_path: Path) -> None:
    """1,000 idle connections from 127.0.0.2, and more opened all the while (up to
    200 a second) as the broker closes old ones: the worker's pushes (100 at least,
    over the time the storm opens 300) are all answered, p99 under 1 s."""
    port = port_of(broker_proc.url)
    held = [connect(port, ATTACKER) for _ in range(IDLE)]
    stop = threading.Event()
    opened = 0

    def storm() -> None:
        nonlocal opened
        while not stop.is_set():
            for _ in range(10):
                held.append(connect(port, ATTACKER))
                opened += 1
            stop.wait(0.05)  # the storm's pace: 10 every 50 ms, 200 a second at most

    attacker = threading.Thread(target=storm, daemon=True)
    attacker.start()
    results: list[tuple[Answer, float]] = []
    try:  # at least 100 pushes, and on until the storm has opened 300 more
        while len(results) < 100 or (opened < 300 and len(results) < 10_000):
            results.append(push_one(port, len(results)))
    finally:
        stop.set()
        attacker.join(GIVE_UP_S)
        for sock in held:
            sock.close()
    assert opened >= 300, f"the storm opened only {opened} connections"
    assert {a.status for a, _ in results} == {200}, \
        [a for a, _ in results if a.status != 200][:3]
    assert p99([t for _, t in results]) < 1.0, sorted(t for _, t in results)[-5:]
    assert pending_jobs(tmp_path) == len(results)


# -- the rule on a small broker ----------------------------------------------------

@pytest.fixture()
def small(tmp_path: Path) -> Iterator[BrokerServer]:
    """A broker with room for 8 connections, 8 from one address, a 30 s header timeout."""
    config = BrokerConfig(self_test=False, header_timeout_s=30, max_connections=8,
                          max_connections_per_address=8)
    with BrokerServer(FileStore(tmp_path), token=TOKEN, config=config).start_in_thread() as s:
        assert ask(s.port, "PUT", "/v1/queues/q", b"{}", token=TOKEN).status == 200
        eventually(lambda: s.connections is not None and len(s.connections) == 0, GIVE_UP_S,
                   "the broker to see that connection closed")
        yield s


def is_open(sock: socket.socket) -> bool:
    """Whether the server still holds ``sock`` open (nothing to read, not closed)."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False
    finally:
        sock.setblocking(True)
        sock.settimeout(GIVE_UP_S)


def long_poll(port: int, source: str) -> socket.socket:
    """A claim waiting up to 30 s for a job, left in flight."""
    sock = connect(port, source)
    sock.sendall(request_bytes("POST", "/v1/queues/q/claim",
                               b'{"worker": "w", "wait_s": 30, "lease_s": 60}', token=TOKEN))
    return sock


def claims_begun(server: BrokerServer) -> float:
    """Claims the broker has answered internally: a long poll counts once it waits."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in server.broker.metrics.render()
               .splitlines() if line.startswith("osqueue_ops_total{") and 'op="claim"' in line)


def test_at_the_limit_the_oldest_silent_connection_makes_room(small: BrokerServer) -> None:
    idle = [connect(small.port, ATTACKER) for _ in range(8)]
    try:
        answer = ask(small.port, "GET", "/v1/queues/q/stats", source=WORKER, token=TOKEN)
        assert answer.status == 200
        assert until_closed(idle[0]) == b""  # the first one connected: closed, unanswered
        assert all(is_open(sock) for sock in idle[1:5])  # the rest not (yet: see hurry)
    finally:
        for sock in idle:
            sock.close()


def snapshot(root: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p.relative_to(root)), p.read_bytes()) for p in root.rglob("*")
                  if p.is_file() and not (p.name.startswith(".") and ".v-" in p.name))


def test_long_polls_in_flight_are_never_shed(small: BrokerServer, tmp_path: Path) -> None:
    """Seven long-poll claims and one kept-alive idle connection fill the broker: a
    new worker's connection closes the idle one, never a long poll; with every
    connection busy the next is refused 503 (the store unchanged), and the long
    polls still get their jobs."""
    polls = [long_poll(small.port, ATTACKER) for _ in range(7)]
    kept = connect(small.port, ATTACKER)
    try:
        kept.sendall(request_bytes("GET", "/healthz"))
        assert read_answer(kept).status == 200  # answered and kept alive: idle
        eventually(lambda: claims_begun(small) >= 7, GIVE_UP_S, "the long polls to wait")
        worker = long_poll(small.port, WORKER)
        assert until_closed(kept) == b""  # the idle one made room
        eventually(lambda: claims_begun(small) >= 8, GIVE_UP_S, "the worker's long poll")
        before = snapshot(tmp_path)
        refused = Answer(until_closed(connect(small.port, WORKER)))
        assert refused.status == 503 and refused.json()["code"] == "broker_unavailable"
        assert "all busy" in refused.json()["error"]
        assert snapshot(tmp_path) == before
        worker.close()  # room again once the broker sees it go
        answer = eventually(lambda: push_eight(small.port), GIVE_UP_S, "a push to get in")
        assert answer.status == 200
        assert [len(read_answer(sock).json()["jobs"]) for sock in polls] == [1] * 7
    finally:
        for sock in [*polls, kept]:
            sock.close()


def push_eight(port: int) -> Answer | None:
    """Eight jobs pushed from the worker, or None if its connection was refused."""
    try:
        answer = ask(port, "POST", "/v1/queues/q/push",
                     orjson.dumps({"jobs": [{"payload": n} for n in range(8)]}),
                     source=WORKER, token=TOKEN)
    except ConnectionError:
        return None
    return answer if answer.status == 200 else None


def test_an_address_at_its_share_is_refused_and_others_are_not(tmp_path: Path) -> None:
    config = BrokerConfig(self_test=False, max_connections=20, max_connections_per_address=3)
    with BrokerServer(FileStore(tmp_path), token=TOKEN,
                      config=config).start_in_thread() as server:
        assert ask(server.port, "PUT", "/v1/queues/q", b"{}", token=TOKEN).status == 200
        polls = [long_poll(server.port, ATTACKER) for _ in range(3)]
        try:
            eventually(lambda: claims_begun(server) >= 3, GIVE_UP_S, "the long polls to wait")
            before = snapshot(tmp_path)
            refused = Answer(until_closed(connect(server.port, ATTACKER)))
            assert refused.status == 503 and refused.json()["code"] == "broker_unavailable"
            assert "this client address holds its limit of 3" in refused.json()["error"]
            assert snapshot(tmp_path) == before
            assert ask(server.port, "GET", "/v1/queues/q/stats", source=WORKER,
                       token=TOKEN).status == 200
        finally:
            for sock in polls:
                sock.close()


def test_near_the_limit_a_silent_connection_must_speak_soon(small: BrokerServer) -> None:
    """Past three quarters of max_connections a new connection must send its first
    byte within BUSY_FIRST_BYTE_S, not the 30 s header timeout."""
    early = [connect(small.port, ATTACKER) for _ in range(5)]
    late = connect(small.port, ATTACKER)  # the sixth of eight
    try:
        start = time.monotonic()
        assert until_closed(late) == b""
        took = time.monotonic() - start
        assert BUSY_FIRST_BYTE_S * 0.8 <= took < 10, took
        assert all(is_open(sock) for sock in early)
    finally:
        for sock in early:
            sock.close()


def test_a_hurried_connection_that_speaks_in_time_gets_the_whole_header_timeout(
        small: BrokerServer) -> None:
    """The short deadline is for the first byte only: a connection told to hurry
    that starts its request at once may take its time over the rest of the
    headers, within the header timeout (the sleep is the slow client)."""
    early = [connect(small.port, ATTACKER) for _ in range(5)]
    late = connect(small.port, WORKER)  # the sixth of eight: told to hurry
    try:
        late.sendall(b"GET /healthz HTTP/1.1\r\n")
        time.sleep(BUSY_FIRST_BYTE_S + 1)
        late.sendall(b"Host: x\r\nConnection: close\r\n\r\n")
        assert Answer(until_closed(late)).status == 200
    finally:
        for sock in early:
            sock.close()
