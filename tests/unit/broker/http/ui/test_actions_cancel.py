"""The dashboard's cancel action (broker.http.ui.actions.cancel) and what the pages
show of cancels and of the dispatch rate limit, through the broker's ASGI app in
process over a memory store, on a clock only the test moves. The store's archive
writes do not land until the test ends, so a cancelled job stays in the queue
object (awaiting its archive object) for the pages to show.

A cancel goes through ``Broker.cancel`` (the API's operation): each answer is
told on the page it returns to, and logged with who asked. A refused POST
(no or a wrong CSRF token, another origin, a read-only dashboard, bad ids)
leaves the store byte-identical and logs no action.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from broker.http.app import App, build_app
from broker.model.ops import CompleteItem, FailItem
from broker.service.broker import Broker
from broker.storage import MemoryStore, ObjectStore
from tests.support.asgi import call
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import run, started
from tests.support.store_files import snapshot
from tests.support.ui_forms import TOKEN, URL, csrf, login, post, told


@asynccontextmanager
async def queue(*, read_only: bool = False, **settings: Any
                ) -> AsyncIterator[tuple[Broker, App, ObjectStore, str]]:
    """A broker with queue ``q``: j0000000001 dead, j0000000002 claimed (its token
    given), j0000000003 and j0000000004 pending; and its app."""
    store = FaultyStore(MemoryStore())
    store.inject("put", NOT_LANDED, times=None, key_contains="/archive/")
    broker = await started(store, URL, Clock(), ui_read_only=read_only)
    try:
        await broker.create_queue("q", {"max_attempts": 1, **settings})
        await broker.push("q", [b'{"n":%d}' % n for n in range(1, 5)])
        dead = await broker.claim("q", "w")
        await broker.fail("q", [FailItem(dead[0].token, "boom", None)])
        (claimed,) = await broker.claim("q", "worker-7")
        assert claimed.id == "j0000000002"
        yield broker, build_app(broker, token=TOKEN), store, claimed.token
    finally:
        store.heal()
        await broker.stop(5)


async def page(app: App, cookie: str, path: str, query: str = "") -> bytes:
    status, body, _ = await call(app, "GET", path, query=query,
                                 headers={"cookie": f"osq_ui={cookie}"})
    assert status == 200, body[:300]
    return body


def actions_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("ui action")]


def test_cancel_selected_tells_each_answer_and_logs_who_asked(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with queue() as (broker, app, _, token):
            cookie = await login(app)
            body = await page(app, cookie, "/ui/queues/q")
            boxes = re.findall(rb'name="ids" value="(j\d+)"', body)
            assert boxes == [b"j0000000002", b"j0000000003", b"j0000000004"]  # not the dead one
            assert b'data-testid="cancel-selected"' in body
            fields = {"csrf": await csrf(app, cookie), "back": "/ui/queues/q?limit=50",
                      "ids": ["j0000000003", "j0000000002", "j0000000001", "j0000000099"]}
            status, _, headers = await post(app, "/ui/queues/q/cancel", fields, cookie)
            assert status == 303 and headers[b"location"] == b"/ui/queues/q?limit=50"
            assert await told(app, cookie, headers) == (
                "Cancel: 1 cancelled; 1 cancel requested (claimed: it ends cancelled at "
                "its worker's next heartbeat, complete or fail, or when its lease runs "
                "out); 1 already finished (completed, dead, or gone from the queue): left "
                "as it was; 1 unknown: no such job.")
            stats = await broker.stats("q")
            assert stats["counts"] == {"pending": 1, "claimed": 1, "dead": 1, "completed": 0,
                                       "cancelled": 1}
            assert stats["cancel_requested"] == 1 and stats["cancelled_total"] == 2
            # the page shows the mark, and offers no second cancel of the marked job
            body = await page(app, cookie, "/ui/queues/q")
            assert re.findall(rb'name="ids" value="(j\d+)"', body) == [b"j0000000004"]
            assert b'data-testid="summary-cancel-requested">1 cancel requested' in body
            assert b'data-testid="summary-cancelled">1<' in body
            assert b'data-testid="summary-cancelled-total">2<' in body
            body = await page(app, cookie, "/ui/queues/q", "status=claimed")
            assert b'cancel requested</span>' in body  # the row says so
            assert b'name="ids"' not in body and b"cancel-selected" not in body
            # the worker is told at its next heartbeat; the job ends cancelled
            (beat,) = await broker.heartbeat("q", [token])
            assert not beat.ok and beat.status == "cancelled"
            assert (await broker.stats("q"))["counts"]["cancelled"] == 2

    with caplog.at_level(logging.INFO, logger="osqueue.ui"):
        run(main())
    (line,) = actions_logged(caplog)
    assert re.fullmatch(r"ui action cancel queue=q ids=j0000000003,j0000000002,j0000000001,"
                        r"j0000000099 cancelled=1 cancel_requested=1 finished=1 unknown=1 "
                        r"retry=0 by=127\.0\.0\.1:1 \(token holder, session s-[0-9a-f]{8}\)",
                        line), line


def test_a_job_page_cancels_its_job_and_shows_the_mark_then_the_end() -> None:
    async def main() -> None:
        async with queue() as (broker, app, _, token):
            cookie = await login(app)
            body = await page(app, cookie, "/ui/queues/q/jobs/j0000000002")
            assert b'data-testid="cancel-job"' in body and b"cancel-requested-at" not in body
            fields = {"csrf": await csrf(app, cookie), "ids": "j0000000002",
                      "back": "/ui/queues/q/jobs/j0000000002"}
            status, _, headers = await post(app, "/ui/queues/q/cancel", fields, cookie)
            assert status == 303
            assert headers[b"location"] == b"/ui/queues/q/jobs/j0000000002"
            assert (await told(app, cookie, headers) or "").startswith(
                "Cancel: 1 cancel requested")
            body = await page(app, cookie, "/ui/queues/q/jobs/j0000000002")
            assert b'data-testid="job-status">claimed<' in body
            assert b'data-testid="job-cancel-requested"' in body
            assert re.search(rb'data-testid="cancel-requested-at"><time datetime="\d{4}-\d\d-\d\dT',
                             body)
            assert b'data-testid="cancel-job"' not in body  # marked already
            (done,) = await broker.complete("q", [CompleteItem(token, b'{"sent": true}')])
            assert not done.ok and done.status == "cancelled"
            body = await page(app, cookie, "/ui/queues/q/jobs/j0000000002")
            assert b'data-testid="job-status">cancelled<' in body
            assert b'data-testid="cancelled-at"' in body and b"cancel-requested-at" in body
            assert re.search(rb'data-testid="archive-key">q/archive/[^<]+\.jsonl<', body)
            assert b"<h2>Result</h2>" not in body and b'data-testid="cancel-job"' not in body
            # a pending job is cancelled at once; a dead one offers no cancel
            body = await page(app, cookie, "/ui/queues/q/jobs/j0000000001")
            assert b'data-testid="cancel-job"' not in body
            status, _, headers = await post(app, "/ui/queues/q/cancel",
                                            {**fields, "ids": "j0000000003"}, cookie)
            assert await told(app, cookie, headers) == "Cancel: 1 cancelled."
            assert (await broker.stats("q"))["counts"]["cancelled"] == 2

    run(main())


def test_a_cancel_without_its_csrf_token_or_from_another_origin_changes_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with queue() as (broker, app, store, _):
            cookie = await login(app)
            token = await csrf(app, cookie)
            before = snapshot(store)
            fields = {"ids": ["j0000000002", "j0000000003"]}
            for sent, headers in [(fields, {}), ({**fields, "csrf": "0" * 32}, {}),
                                  ({**fields, "csrf": token}, {"origin": "http://evil.example"})]:
                status, body, _ = await post(app, "/ui/queues/q/cancel", sent, cookie, headers)
                assert status == 403, (sent, headers, body[:200])
                assert snapshot(store) == before
            # no ids, not a job id, more fields than a form may have
            for bad, refused in [([], 422), (["nope"], 422), (["j0000000003"] * 1001, 400)]:
                status, body, _ = await post(app, "/ui/queues/q/cancel",
                                             {"csrf": token, "ids": bad}, cookie)
                assert status == refused, (bad[:2], body[:200])
                assert snapshot(store) == before
            assert (await broker.stats("q"))["cancelled_total"] == 0

    with caplog.at_level(logging.INFO, logger="osqueue.ui"):
        run(main())
    assert actions_logged(caplog) == []


def test_read_only_hides_cancel_and_refuses_it(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with queue(read_only=True) as (_, app, store, _):
            cookie = await login(app)
            for path in ("/ui/queues/q", "/ui/queues/q?status=pending",
                         "/ui/queues/q/jobs/j0000000002", "/ui/queues/q/jobs/j0000000003"):
                path, _, query = path.partition("?")
                body = await page(app, cookie, path, query)
                assert b"/cancel" not in body and b'name="ids"' not in body, path
                assert b"cancel-selected" not in body and b"cancel-job" not in body
            token = await csrf(app, cookie, "/ui/")  # the sign-out form still has one
            before = snapshot(store)
            status, body, _ = await post(app, "/ui/queues/q/cancel",
                                         {"csrf": token, "ids": ["j0000000002", "j0000000003"]},
                                         cookie)
            assert status == 403 and b"read-only" in body
            assert snapshot(store) == before

    with caplog.at_level(logging.INFO, logger="osqueue.ui"):
        run(main())
    assert actions_logged(caplog) == []


def test_the_status_filter_knows_cancelled_and_the_summary_shows_the_dispatch_rate() -> None:
    async def main() -> None:
        async with queue(max_claims_per_s=5, claim_burst=10) as (broker, app, _, _):
            await broker.cancel("q", ["j0000000004"])
            cookie = await login(app)
            body = await page(app, cookie, "/ui/queues/q", "status=cancelled")
            assert b'<option value="cancelled" selected>' in body
            assert re.findall(rb'<tr data-job="(j\d+)"', body) == [b"j0000000004"]
            assert b'name="ids"' not in body  # nothing to select among cancelled jobs
            body = await page(app, cookie, "/ui/queues/q/summary")
            stats = await broker.stats("q")
            assert stats["claim_tokens"] == 8  # two jobs claimed of a burst of 10
            assert b'data-testid="summary-claims-per-s">0.2<' in body  # 2 jobs over 10 s
            assert (b'data-testid="summary-claim-limit">limit 5.0/s, burst 10<br>8 tokens left<'
                    in body)
            await broker.create_queue("q", {"max_claims_per_s": 0})
            body = await page(app, cookie, "/ui/queues/q/summary")
            assert b'data-testid="summary-claim-limit">no limit<' in body

    run(main())
