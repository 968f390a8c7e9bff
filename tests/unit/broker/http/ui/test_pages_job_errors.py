"""The dashboard's job page (broker.http.ui templates/job.html) lists a job's
error history, oldest first, once it failed more than once: each attempt, when
and its text (escaped); a job that failed once shows its last error alone.
Through the broker's ASGI app in process over a memory store."""

from __future__ import annotations

from broker.http.app import build_app
from broker.model.ops import FailItem, NewJob
from broker.storage import MemoryStore
from tests.support.asgi import call
from tests.support.faults import Clock
from tests.support.inprocess import run, started
from tests.support.ui_forms import TOKEN, URL, login


def test_a_jobs_page_lists_its_error_history_once_it_failed_twice() -> None:
    store = MemoryStore()

    async def main() -> None:
        broker = await started(store, URL, Clock(1_767_225_600_000))
        try:
            ids = await broker.push("q", [NewJob(b'{"doc":1}', max_attempts=3),
                                          NewJob(b'{"doc":2}', max_attempts=3)])
            for text in ("<b>first</b>", "second"):
                got = await broker.claim("q", "w", 2)
                await broker.fail("q", [FailItem(j.token, text, 0) for j in got
                                        if j.id == ids[0] or text == "<b>first</b>"])
            app = build_app(broker, token=TOKEN)
            cookie = {"cookie": f"osq_ui={await login(app)}"}
            status, body, _ = await call(app, "GET", f"/ui/queues/q/jobs/{ids[0]}",
                                         headers=cookie)
            assert status == 200, body[:300]
            history = body[body.index(b'data-testid="error-history"'):]
            history = history[:history.index(b"</ol>")]
            assert history.count(b"<li>") == 2
            assert history.index(b"attempt 1") < history.index(b"&lt;b&gt;first&lt;/b&gt;") \
                < history.index(b"attempt 2") < history.index(b"second")
            assert b"<b>first</b>" not in body
            status, body, _ = await call(app, "GET", f"/ui/queues/q/jobs/{ids[1]}",
                                         headers=cookie)
            assert status == 200 and b'data-testid="error-history"' not in body
            assert b"&lt;b&gt;first&lt;/b&gt;" in body  # (its last error alone)
        finally:
            await broker.stop(5)

    run(main())
