"""The wrong-token throttle (broker.http.throttle): the pure rule and its tally with
hypothesis, then the API and the dashboard's login through the ASGI app in
process with an injected clock. Every refused request leaves the store
byte-identical."""

from __future__ import annotations

import asyncio
import logging
import pickle
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import TooManyRequests
from broker.http.app import App, build_app
from broker.http.server import BrokerServer
from broker.http.throttle import Guard, Tally, Throttle
from broker.service.config import BrokerConfig
from broker.storage import FileStore, MemoryStore, ObjectStore
from osqueue_spark import QueueClient
from tests.support.asgi import call
from tests.support.broker_process import BrokerProcess
from tests.support.faults import Clock
from tests.support.inprocess import run, started
from tests.support.sockets import ask
from tests.support.store_files import snapshot

TOKEN = "throttle-test-token-0123456789"
WRONG = "wrong-token-never-logged"
URL = "http://127.0.0.1:8765"
FORM = "application/x-www-form-urlencoded"
ME = ("10.0.0.7", 5000)
NEIGHBOUR = ("10.0.0.8", 5000)


# -- the rule ----------------------------------------------------------------------

def test_an_address_past_its_budget_waits_and_others_do_not() -> None:
    throttle = Throttle(per_min=10)
    for n in range(10):
        assert throttle.wait_s("a", now=0.0) == 0.0, n
        throttle.failed("a", now=0.0)
    assert throttle.wait_s("a", now=0.0) == pytest.approx(6.0)  # one more in 60/10 s
    assert throttle.wait_s("b", now=0.0) == 0.0
    assert throttle.wait_s("a", now=6.0) == 0.0  # one try back ...
    throttle.failed("a", now=6.0)
    assert throttle.wait_s("a", now=6.0) == pytest.approx(6.0)  # ... and spent again


def test_no_budget_means_no_throttling() -> None:
    throttle = Throttle(per_min=0)
    for _ in range(1000):
        throttle.failed("a", now=0.0)
    assert throttle.wait_s("a", 0.0) == 0.0 and len(throttle) == 0


def test_memory_stays_bounded_whatever_the_addresses() -> None:
    throttle = Throttle(per_min=2, max_addresses=100)
    for n in range(10_000):
        throttle.failed(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}", now=n * 0.001)
    assert len(throttle) <= 100 and len(throttle.blocked) <= 100


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 30),
       st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 5, allow_nan=False)),
                max_size=200))
def test_no_address_gets_more_guesses_than_its_budget(per_min: int,
                                                      tries: list[tuple[str, float]]) -> None:
    """Over any stretch of time, the wrong tokens an address gets looked at (it
    guesses whenever it is let) are at most the budget plus what the elapsed time
    gives back, and a wait it is told is never longer than one try's worth."""
    throttle = Throttle(per_min)
    now, looked_at = 0.0, {a: [] for a in "abc"}
    for address, step in tries:
        now += step
        wait = throttle.wait_s(address, now)
        assert 0.0 <= wait <= 60.0 / per_min + 1e-6
        if wait == 0.0:
            throttle.failed(address, now)
            looked_at[address].append(now)
    for times in looked_at.values():
        for i, start in enumerate(times):
            for j in range(i, len(times)):
                allowed = per_min + (times[j] - start) * per_min / 60.0
                assert j - i + 1 <= allowed + 1e-6


def test_the_tally_says_how_many_from_how_many_addresses() -> None:
    tally = Tally(window_s=60)
    assert tally.note("10.0.0.7", now=0) is True  # opens the window: logged in full
    for _ in range(299):
        assert tally.note("10.0.0.7", now=1) is False
    tally.note("10.0.0.8", now=2, throttled=True)
    line = tally.close(now=60)
    assert line == ("refused 300 more requests with a missing or wrong token (1 of them 429 "
                    "while throttled) from 2 addresses in the last 60 s: 10.0.0.7 (299), "
                    "10.0.0.8 (1)")
    assert tally.close(now=61) is None and tally.note("x", now=62) is True


# -- through the app -------------------------------------------------------------


@asynccontextmanager
async def app_with(clock: Clock, per_min: int = 10) -> AsyncIterator[tuple[App, ObjectStore]]:
    """A broker (queue ``q``, one job) whose app and dashboard share one guard on ``clock``."""
    store = MemoryStore()
    broker = await started(store, URL)
    try:
        await broker.push("q", [b'{"n": 1}'])
        app = build_app(broker, token=TOKEN)
        guard = Guard(per_min, clock=clock.monotonic)
        app.guard = guard
        assert app.ui is not None
        app.ui.guard = guard
        yield app, store
    finally:
        await broker.stop(5)


def test_wrong_bearer_tokens_get_429_with_retry_after_even_for_the_right_token() -> None:
    clock = Clock()

    async def main() -> None:
        async with app_with(clock) as (app, store):
            before = snapshot(store)
            for _ in range(10):
                status, _, _ = await call(app, "POST", "/v1/queues/q/purge", b'{"all": true}',
                                          token=WRONG, client=ME)
                assert status == 401
            # throttled: refused before its token is looked at, whichever token it is
            for token in (WRONG, TOKEN):
                status, body, headers = await call(app, "POST", "/v1/queues/q/purge",
                                                   b'{"all": true}', token=token, client=ME)
                error = orjson.loads(body)
                assert (status, error["code"]) == (429, "too_many_requests")
                assert headers[b"retry-after"] == b"6" and error["retry_after_s"] == 6
                assert headers[b"connection"] == b"close"
            status, _, headers = await call(app, "POST", "/v1/queues/q/push",
                                            b'{"jobs": [{"payload": 2}]}', token=TOKEN,
                                            client=ME)
            assert status == 429 and headers[b"retry-after"] == b"6"  # the hot path too
            assert snapshot(store) == before
            # a neighbour is not held up; nor is a request that carries no token
            status, _, _ = await call(app, "GET", "/v1/queues/q/stats", token=TOKEN,
                                      client=NEIGHBOUR)
            assert status == 200
            status, _, _ = await call(app, "GET", "/v1/queues/q/stats", token=None, client=ME)
            assert status == 401
            clock.advance(6.0)  # Retry-After later: the right token is served again
            status, _, _ = await call(app, "GET", "/v1/queues/q/stats", token=TOKEN, client=ME)
            assert status == 200

    run(main())


def test_missing_tokens_are_not_counted_as_guesses() -> None:
    clock = Clock()

    async def main() -> None:
        async with app_with(clock) as (app, _):
            for _ in range(50):
                status, _, _ = await call(app, "GET", "/v1/queues/q/stats", client=ME)
                assert status == 401
            status, _, _ = await call(app, "GET", "/v1/queues/q/stats", token=TOKEN, client=ME)
            assert status == 200

    run(main())


def test_healthz_with_a_wrong_token_is_a_guess_too() -> None:
    """/healthz answers details to the token: a wrong one there counts and is throttled."""
    clock = Clock()

    async def main() -> None:
        async with app_with(clock, per_min=2) as (app, _):
            for _ in range(2):
                status, body, _ = await call(app, "GET", "/healthz", token=WRONG, client=ME)
                assert (status, orjson.loads(body)) == (200, {"ok": True})
            status, _, headers = await call(app, "GET", "/healthz", token=TOKEN, client=ME)
            assert status == 429 and headers[b"retry-after"] == b"30"
            status, body, _ = await call(app, "GET", "/healthz", client=ME)  # no token: bare
            assert (status, orjson.loads(body)) == (200, {"ok": True})

    run(main())


async def login(app: App, token: str, client: tuple[str, int]) -> tuple[int, bytes,
                                                                         dict[bytes, bytes]]:
    return await call(app, "POST", "/ui/login",
                      urlencode({"token": token, "next": "/ui/"}).encode(),
                      content_type=FORM, client=client,
                      headers={"origin": URL, "host": "127.0.0.1:8765"})


def test_the_login_form_and_the_api_share_one_budget() -> None:
    clock = Clock()

    async def main() -> None:
        async with app_with(clock) as (app, store):
            before = snapshot(store)
            for _ in range(5):
                assert (await login(app, WRONG, ME))[0] == 401
            for _ in range(5):
                status, _, _ = await call(app, "GET", "/v1/queues/q/stats", token=WRONG,
                                          client=ME)
                assert status == 401
            status, body, headers = await login(app, TOKEN, ME)  # the right token: still 429
            assert status == 429 and headers[b"retry-after"] == b"6"
            assert b"osq_ui=" not in headers.get(b"set-cookie", b"")
            assert b"too many wrong tokens" in body
            status, _, headers = await call(app, "GET", "/ui/", token=TOKEN, client=ME)
            assert status == 429 and headers[b"retry-after"] == b"6"  # a bearer header too
            assert (await login(app, TOKEN, NEIGHBOUR))[0] == 303
            clock.advance(6.0)
            status, _, headers = await login(app, TOKEN, ME)
            assert status == 303 and b"osq_ui=" in headers[b"set-cookie"]
            assert snapshot(store) == before

    run(main())


def test_300_wrong_logins_write_two_lines_and_never_the_token(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    statuses: list[int] = []

    async def main() -> None:
        async with app_with(clock) as (app, _):
            with caplog.at_level(logging.INFO):
                for _ in range(300):
                    statuses.append((await login(app, WRONG, ME))[0])
                    clock.advance(0.001)
                app.guard.flush()  # the window's end (its timer would, 60 s on)

    run(main())
    assert statuses == [401] * 10 + [429] * 290
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 2, lines
    assert lines[0].startswith("ui: refused login from 10.0.0.7:5000: wrong token")
    assert lines[1].startswith("refused 299 more requests with a missing or wrong token "
                               "(290 of them 429 while throttled) from 1 address")
    assert all(WRONG not in r.getMessage() and TOKEN not in r.getMessage()
               for r in caplog.records)


def test_the_summary_is_written_by_a_timer_at_the_end_of_the_window(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with app_with(Clock()) as (app, _):
            app.guard = Guard(10, window_s=0.05)
            with caplog.at_level(logging.WARNING, logger="osqueue.http"):
                for _ in range(3):
                    await call(app, "GET", "/v1/queues/q/stats", token=WRONG, client=ME)
                for _ in range(1000):  # until the timer has written it (fails after 10 s)
                    if len(refusals()) == 2:
                        break
                    await asyncio.sleep(0.01)

    def refusals() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "osqueue.http"]

    run(main())
    lines = refusals()
    assert len(lines) == 2 and lines[1].startswith("refused 2 more requests"), lines


def test_too_many_requests_pickles_with_its_wait() -> None:
    error = pickle.loads(pickle.dumps(TooManyRequests("slow down", retry_after_s=6)))
    assert error.details == {"retry_after_s": 6} and error.retryable and error.status == 429


# -- a real broker process -------------------------------------------------------

def test_300_wrong_logins_to_a_broker_process_are_throttled_and_logged_once(
        tmp_path: Path) -> None:
    """The acceptance test: 300 wrong tokens typed into the login form, then 300 as
    bearer headers, from one address: 10 are looked at, the rest get 429 with
    Retry-After; one log line says so (the summary comes at the minute), never
    the token; the store is unchanged."""
    with BrokerProcess(f"file://{tmp_path}", "--token-env", "OSQ_THROTTLE_TOKEN",
                       env={"OSQ_THROTTLE_TOKEN": TOKEN}) as proc:
        port = int(proc.url.rsplit(":", 1)[1])
        assert ask(port, "PUT", "/v1/queues/q", b"{}", token=TOKEN).status == 200
        before = snapshot(FileStore(tmp_path))
        form = urlencode({"token": WRONG, "next": "/ui/"}).encode()
        logins = [ask(port, "POST", "/ui/login", form,
                      headers={"Origin": "http://127.0.0.1", "Content-Type": FORM})
                  for _ in range(300)]
        bearer = [ask(port, "POST", "/v1/queues/q/purge", b'{"all": true}', token=WRONG)
                  for _ in range(300)]
        assert snapshot(FileStore(tmp_path)) == before
    assert [a.status for a in logins] == [401] * 10 + [429] * 290
    assert {a.status for a in bearer} == {429}
    assert all(1 <= int(a.header("retry-after") or 0) <= 6 for a in logins[10:] + bearer)
    assert bearer[0].json()["code"] == "too_many_requests"
    refused = [line for line in proc.lines if "refused" in line]
    assert len(refused) == 1 and "refused login from 127.0.0.1" in refused[0], refused
    assert TOKEN not in proc.output and WRONG not in proc.output


def test_a_client_with_the_right_token_rides_out_a_neighbour_s_throttle(
        tmp_path: Path) -> None:
    """A neighbour on the same address spends the budget; the QueueClient holding
    the right token gets 429, retries it (retryable) and is served once the
    Retry-After has passed."""
    config = BrokerConfig(self_test=False, wrong_tokens_per_min=60)  # a try back each 1 s
    with BrokerServer(FileStore(tmp_path), token=TOKEN, config=config).start_in_thread() as s:
        for _ in range(60):
            assert ask(s.port, "GET", "/v1/queues/q/stats", token=WRONG).status == 401
        assert ask(s.port, "GET", "/v1/queues/q/stats", token=TOKEN).status == 429
        client = QueueClient(s.url, "q", token=TOKEN, retry_s=30)
        try:
            assert client.push({"n": 1})
        finally:
            client.close()
