"""The store's list of signed-out dashboard sessions (broker.service.signouts), in
process over a memory store: a sign-out written by one broker is refused by
another and by a new broker on the store; racing sign-outs all land (an injected
conflict, a lost reply, two at once); the list stays bounded without letting a
signed-out session back in; and a list that cannot be read refuses the sessions
a broker has not vouched for (fail closed), logging why without a cookie.

The refused actions leave the queue's object byte-identical.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest

from broker import paths
from broker.errors import CorruptState, StorageUnavailable
from broker.http.app import App, build_app
from broker.http.ui.auth import Sessions
from broker.service import signouts
from broker.service.broker import Broker
from broker.service.signouts import (
    SignedOut,
    SignOuts,
    decode,
    session_key,
)
from broker.storage import MemoryStore, ObjectStore
from tests.support.asgi import call
from tests.support.faults import LOST_REPLY, NOT_LANDED, REFUSED, Clock, FaultyStore
from tests.support.inprocess import run, started
from tests.support.ui_forms import TOKEN, URL, csrf, login, post

TTL_S = 12 * 3600


async def io(fn: Callable[..., Any], *args: Any) -> Any:
    """A store call off the event loop (what the broker's I/O threads do)."""
    return await asyncio.to_thread(fn, *args)


def listed(store: ObjectStore) -> SignedOut:
    return decode(store.read(paths.SIGNED_OUT_KEY).data)


def queue_object(store: ObjectStore, queue: str = "q") -> bytes:
    return bytes(store.read(paths.state_key(queue)).data)


@asynccontextmanager
async def two_brokers(store: ObjectStore) -> AsyncIterator[tuple[Broker, App, Broker, App]]:
    """Brokers A (serving queue ``qa``) and B (serving ``qb``) on one store, one token."""
    a = await started(store, URL)
    b = await started(store, "http://127.0.0.1:8766")
    try:
        await a.create_queue("qa")
        await b.create_queue("qb")
        yield a, build_app(a, token=TOKEN), b, build_app(b, token=TOKEN)
    finally:
        await b.stop(5)
        await a.stop(5)


async def paused(broker: Broker, queue: str) -> bool:
    return bool((await broker.stats(queue))["paused"])


def test_a_sign_out_on_one_broker_holds_on_another_and_on_a_new_one() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with two_brokers(store) as (_, app_a, b, app_b):
            cookie = await login(app_a)
            token = await csrf(app_b, cookie, "/ui/queues/qb")  # B accepts A's session
            status, _, headers = await post(app_a, "/ui/logout",
                                            {"csrf": await csrf(app_a, cookie, "/ui/")}, cookie)
            assert status == 303 and b"Max-Age=0" in headers[b"set-cookie"]
            assert len(listed(store).sessions) == 1
            assert "osq_ui" not in store.get(paths.SIGNED_OUT_KEY).decode()

            before = queue_object(store, "qb")
            status, _, _ = await post(app_b, "/ui/queues/qb/pause", {"csrf": token}, cookie,
                                      headers={"origin": "http://127.0.0.1:8766",
                                               "host": "127.0.0.1:8766"})
            assert status == 401
            assert queue_object(store, "qb") == before and not await paused(b, "qb")
            status, _, headers = await call(app_b, "GET", "/ui/queues/qb",
                                            headers={"cookie": f"osq_ui={cookie}"})
            assert status == 303 and headers[b"location"].startswith(b"/ui/login")

            # a broker started afterwards (a restart) reads the list too
            c = await started(store, "http://127.0.0.1:8767")
            try:
                app_c = build_app(c, token=TOKEN)
                await c.create_queue("qc")
                before = queue_object(store, "qc")
                status, _, _ = await post(app_c, "/ui/queues/qc/pause", {"csrf": token}, cookie,
                                          headers={"origin": "http://127.0.0.1:8767",
                                                   "host": "127.0.0.1:8767"})
                assert status == 401 and queue_object(store, "qc") == before
                # a new session works there: the refusal was the sign-out's
                fresh = await login(app_c)
                status, _, _ = await post(app_c, "/ui/queues/qc/pause",
                                          {"csrf": await csrf(app_c, fresh, "/ui/queues/qc")},
                                          fresh, headers={"origin": "http://127.0.0.1:8767",
                                                          "host": "127.0.0.1:8767"})
                assert status == 303 and await paused(c, "qc")
            finally:
                await c.stop(5)

    run(main())


def test_racing_sign_outs_all_land() -> None:
    """Broker B signs a session out between A's read and A's write: A's write gets
    Conflict, re-reads and adds its own; then a lost reply, and two at once."""
    async def main() -> None:
        inner = MemoryStore()
        store = FaultyStore(inner)
        clock = Clock()
        mine = SignOuts(store, io, ttl_s=TTL_S, clock=clock.now_ms)
        theirs = SignOuts(inner, io, ttl_s=TTL_S, clock=clock.now_ms)
        issued = clock.ms // 1000
        await theirs.record(session_key("first"), issued)

        def other_broker_writes(_key: str) -> None:
            asyncio.run(theirs.record(session_key("theirs"), issued))

        store.inject("write_if_match", None, before=other_broker_writes)
        store.inject("write_if_match", "lost_reply_412")  # a retry landed: 412 after it
        await mine.record(session_key("mine"), issued)
        assert ("write_if_match", None, paths.SIGNED_OUT_KEY) in store.injected
        found = listed(inner)
        assert set(found.sessions) == {session_key(n) for n in ("first", "theirs", "mine")}
        assert found.seq == 3  # (three writes: first, theirs, mine; one version each)

        store.inject("write_if_match", LOST_REPLY)
        await mine.record(session_key("lost reply"), issued)
        assert session_key("lost reply") in listed(inner).sessions

        names = [f"together-{i}" for i in range(6)]
        brokers = [SignOuts(inner, io, ttl_s=TTL_S, clock=clock.now_ms)
                   for _ in names]
        await asyncio.gather(*(s.record(session_key(n), issued)
                               for s, n in zip(brokers, names, strict=True)))
        assert {session_key(n) for n in names} <= set(listed(inner).sessions)
        fresh = SignOuts(inner, io, ttl_s=TTL_S, clock=clock.now_ms)
        for name in ("first", "theirs", "mine", "lost reply", *names):
            assert await fresh.signed_out(session_key(name), issued, max_age_s=0)
        assert not await fresh.signed_out(session_key("never"), issued, max_age_s=0)

    run(main())


def test_a_sign_out_that_cannot_be_written_fails_and_changes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signouts, "WRITE_ATTEMPTS", 3)

    async def main() -> None:
        inner = MemoryStore()
        store = FaultyStore(inner)
        ours = SignOuts(store, io, ttl_s=TTL_S)
        store.inject("create_if_absent", NOT_LANDED, times=None)
        with pytest.raises(StorageUnavailable, match="still open"):
            await ours.record(session_key("s"), 1_700_000_000)
        assert inner.list("") == []
        store.heal()
        store.inject("create_if_absent", REFUSED)
        with pytest.raises(Exception, match="AccessDenied"):
            await ours.record(session_key("s"), 1_700_000_000)
        assert inner.list("") == []

    run(main())


def test_the_list_drops_expired_entries_and_past_its_bound_raises_its_floor() -> None:
    ttl_ms = 1000 * TTL_S
    now = 1_700_000_000_000
    listing = SignedOut.empty()
    for i in range(5):
        listing = listing.adding(f"{i:032x}", now + i * 1000, now - ttl_ms, ttl_ms, bound=3)
    # the two expiring first left; every session issued up to the later of them is out
    assert sorted(listing.sessions) == [f"{i:032x}" for i in (2, 3, 4)]
    assert listing.before_ms == now + 1000 - ttl_ms
    assert listing.holds("f" * 32, now + 1000 - ttl_ms)  # issued then: refused
    assert not listing.holds("f" * 32, now + 1001 - ttl_ms)
    assert decode(listing.encode()) == listing
    # once every entry has expired, the next write drops them, and the floor
    later = listing.adding("a" * 32, now + 2 * ttl_ms, now + ttl_ms, ttl_ms, bound=3)
    assert later.sessions == {"a" * 32: now + 2 * ttl_ms} and later.before_ms is None
    assert later.seq == listing.seq + 1
    doc = orjson.loads(later.encode())
    assert doc["format"] == "osqueue-ui-signed-out" and doc["version"] == 1


@pytest.mark.parametrize("data", [b"not json", b'{"format": "other"}', b"[]",
                                  b'{"format": "osqueue-ui-signed-out", "version": 1, '
                                  b'"seq": 1, "sessions": {"zz": "2026-01-01T00:00:00Z"}}'])
def test_a_list_that_does_not_parse_is_refused(data: bytes) -> None:
    with pytest.raises(CorruptState):
        decode(data)


def test_an_unreadable_list_refuses_sessions_not_vouched_for_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        inner = MemoryStore()
        store = FaultyStore(inner)
        sessions = Sessions(TOKEN)

        def unseen() -> tuple[str, str]:
            """A session cookie broker A has never seen, and its CSRF token."""
            value = sessions.issue()
            nonce = sessions.check(value)
            assert nonce is not None
            return value, sessions.csrf(nonce)

        async with two_brokers(store) as (a, app_a, _, _):
            seen = await login(app_a)  # issued here: vouched for
            token = await csrf(app_a, seen, "/ui/queues/qa")
            other, other_csrf = unseen()
            store.inject("head", NOT_LANDED, times=None, key_contains="_osqueue/")
            before = queue_object(inner, "qa")
            status, body, _ = await post(app_a, "/ui/queues/qa/pause", {"csrf": other_csrf},
                                         other)
            assert status == 503 and b"sign-out list" in body
            status, body, _ = await call(app_a, "GET", "/ui/queues/qa",
                                         headers={"cookie": f"osq_ui={other}"})
            assert status == 503 and b"try again shortly" in body
            assert queue_object(inner, "qa") == before and not await paused(a, "qa")
            # the session this broker issued goes on (judged by the list as last read)
            status, _, _ = await post(app_a, "/ui/queues/qa/pause", {"csrf": token}, seen)
            assert status == 303 and await paused(a, "qa")
            store.heal()  # readable again: the other session is checked, and let in
            status, _, _ = await post(app_a, "/ui/queues/qa/resume", {"csrf": other_csrf},
                                      other)
            assert status == 303 and not await paused(a, "qa")

            # a list that does not parse: the same, and a sign-out does not overwrite it
            inner.create_if_absent(paths.SIGNED_OUT_KEY, b"garbage")
            third, third_csrf = unseen()
            before = queue_object(inner, "qa")
            status, _, _ = await post(app_a, "/ui/queues/qa/pause", {"csrf": third_csrf}, third)
            assert status == 503 and queue_object(inner, "qa") == before
            status, body, _ = await post(app_a, "/ui/logout",
                                         {"csrf": await csrf(app_a, seen, "/ui/")}, seen)
            assert status == 500 and b"is not JSON" in body
            assert inner.get(paths.SIGNED_OUT_KEY) == b"garbage"
            inner.delete(paths.SIGNED_OUT_KEY)
            status, _, _ = await post(app_a, "/ui/queues/qa/pause", {"csrf": third_csrf}, third)
            assert status == 303 and await paused(a, "qa")

    with caplog.at_level(logging.INFO, logger="osqueue.ui"):
        run(main())
    text = caplog.text
    assert "cannot read the sign-out list _osqueue/ui/signed-out.json" in text
    assert len(re.findall("cannot read the sign-out list", text)) == 2  # once per outage
    assert len(re.findall("can be read again", text)) == 2
    assert "osq_ui" not in text and not re.search(r"\d{10}\.[\w-]{20,}\.", text)


def test_a_page_checks_the_list_at_most_every_few_seconds_an_action_every_time() -> None:
    async def main() -> None:
        inner = MemoryStore()
        store = FaultyStore(inner)
        clock = Clock()
        ours = SignOuts(store, io, ttl_s=TTL_S, clock=clock.now_ms,
                        monotonic=clock.monotonic)
        issued = clock.ms // 1000
        assert not await ours.signed_out("a" * 32, issued, max_age_s=2)
        heads = store.calls.get("head", 0)
        assert not await ours.signed_out("a" * 32, issued, max_age_s=2)
        assert store.calls.get("head", 0) == heads  # cached
        await SignOuts(inner, io, ttl_s=TTL_S).record("a" * 32, issued)
        assert await ours.signed_out("a" * 32, issued, max_age_s=0)  # an action reads again
        clock.advance(2.5)
        assert not await ours.signed_out("b" * 32, issued, max_age_s=2)
        reads = store.calls.get("read", 0)
        clock.advance(2.5)
        assert not await ours.signed_out("b" * 32, issued, max_age_s=2)
        assert store.calls.get("read", 0) == reads  # the etag did not move: no read
        with pytest.raises(StorageUnavailable, match="cannot tell whether"):
            store.inject("head", NOT_LANDED)
            await ours.signed_out("c" * 32, issued, max_age_s=0)

    run(main())
