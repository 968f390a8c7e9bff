"""The dashboard finds finished jobs (broker.http.ui.pages job_page and the
queue page's find box): a completed or cancelled job that left the queue
object is shown from the archive, through the broker's ASGI app in process."""

from __future__ import annotations

import re

from broker.http.app import build_app
from broker.model.ops import CompleteItem
from broker.storage import MemoryStore
from tests.support.asgi import call
from tests.support.faults import Clock
from tests.support.inprocess import archived_and_dropped, run, started
from tests.support.ui_forms import TOKEN, URL, login


def test_a_finished_jobs_page_shows_it_from_the_archive() -> None:
    store = MemoryStore()
    clock = Clock()  # (the drop of archived jobs waits a second on it: the test moves it)

    async def main() -> None:
        broker = await started(store, URL, clock)
        try:
            ids = await broker.push("q", [b'{"doc":"a"}', b'{"doc":"b"}', b'{"doc":"c"}'])
            jobs = await broker.claim("q", "worker-9", 1)
            await broker.complete("q", [CompleteItem(jobs[0].token, b'{"pages":12}')])
            await broker.cancel("q", [ids[1]])
            await archived_and_dropped(broker, store, clock, deleted=False)
            app = build_app(broker, token=TOKEN)
            cookie = {"cookie": f"osq_ui={await login(app)}"}
            status, body, _ = await call(app, "GET", f"/ui/queues/q/jobs/{ids[0]}",
                                         headers=cookie)
            assert status == 200, body[:300]
            assert b'data-testid="job-status">completed<' in body
            assert re.search(rb'<h2>Result</h2>\s*<pre class="json"[^>]*>\{\s*&#34;pages&#34;: 12',
                             body)
            assert b'data-testid="archive-key">q/archive/' in body
            assert jobs[0].token.encode() not in body
            status, body, _ = await call(app, "GET", f"/ui/queues/q/jobs/{ids[1]}",
                                         headers=cookie)
            assert status == 200 and b'data-testid="job-status">cancelled<' in body
            assert b'data-testid="cancel-job"' not in body  # (finished: nothing to offer)
            # the find box goes to a finished job's page too
            status, _, headers = await call(app, "GET", "/ui/queues/q", query=f"find={ids[0]}",
                                            headers=cookie)
            assert status == 303 and headers[b"location"] == f"/ui/queues/q/jobs/{ids[0]}".encode()
            status, body, _ = await call(app, "GET", "/ui/queues/q/jobs/j0000000099",
                                         headers=cookie)
            assert status == 404 and b'data-testid="no-job"' in body
        finally:
            await broker.stop(5)

    run(main())
