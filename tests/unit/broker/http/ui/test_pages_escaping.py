"""What the dashboard shows of text anyone can write (job keys, worker names,
errors, payloads, a store's broker URL) has its control characters escaped
(broker.display.printable, the command-line tools' rule): no NUL, escape sequence or
bidi override reaches the page raw; an error's or a payload's line breaks stay.
Through the broker's ASGI app in process, over a memory store."""

from __future__ import annotations

import orjson

from broker.http.app import build_app
from broker.model.ops import FailItem, NewJob
from broker.storage import MemoryStore
from tests.support.asgi import call
from tests.support.inprocess import run, started
from tests.support.ui_forms import TOKEN, URL

#: A right-to-left override, a NUL, an escape sequence and a C1 control.
NASTY = "\u202e\x00\x1b[2J\x9b"
#: How the page shows them (HTML-escaped: the backslash is text).
SHOWN = "\\u202e\\x00\\x1b[2J\\x9b"


def raw_controls(body: bytes) -> list[str]:
    text = body.decode()
    return sorted({f"U+{ord(c):04X}" for c in text if (ord(c) < 0x20 and c not in "\n\t")
                   or 0x7F <= ord(c) < 0xA0 or c in "\u202a\u202b\u202c\u202d\u202e"
                   "\u2066\u2067\u2068\u2069\u200e\u200f"})


def test_control_characters_in_user_text_are_shown_escaped() -> None:
    async def main() -> None:
        store = MemoryStore()
        broker = await started(store, URL)
        try:
            await broker.create_queue("q", {"max_attempts": 1})
            payload = orjson.dumps({"note": f"total{NASTY}", "n": 1})
            await broker.push("q", [NewJob(payload, key=f"key{NASTY}"), b'{"n": 2}'])
            (job,) = await broker.claim("q", f"worker{NASTY}")
            await broker.fail("q", [FailItem(job.token, f"Error{NASTY}\n  at line 2", None)])
            await broker.claim("q", f"other{NASTY}")  # j0000000002 stays claimed
            app = build_app(broker, token=TOKEN)
            pages = {}
            for path, query in [("/ui/queues/q", ""), ("/ui/queues/q", "status=dead"),
                                ("/ui/queues/q/jobs/j0000000001", ""),
                                ("/ui/queues/q/jobs/j0000000002", ""),
                                ("/ui/", ""), ("/ui/fragments/queues", ""),
                                ("/ui/queues/q/summary", "")]:
                status, body, _ = await call(app, "GET", path, query=query, token=TOKEN)
                assert status == 200, (path, body[:300])
                assert raw_controls(body) == [], (path, query)
                pages[path, query] = body.decode()
            job_page = pages["/ui/queues/q/jobs/j0000000001", ""]
            assert f"key{SHOWN}" in job_page  # its idempotency key
            assert f"Error{SHOWN}\n  at line 2" in job_page  # its lines kept
            # in a payload, JSON escapes C0 controls itself; the page escapes the rest
            note = "total\\u202e\\u0000\\u001b[2J\\x9b"
            assert f'"note": "{note}"'.replace('"', "&#34;") in job_page
            assert "other" + SHOWN in pages["/ui/queues/q/jobs/j0000000002", ""]
            rows = pages["/ui/queues/q", ""]
            assert f"other{SHOWN}" in rows  # the worker column
            assert f'{{"note":"{note}"'.replace('"', "&#34;") in rows  # the preview
            assert f"Error{SHOWN}\\n  at line 2" in pages["/ui/queues/q", "status=dead"]
        finally:
            await broker.stop(5)

    run(main())
