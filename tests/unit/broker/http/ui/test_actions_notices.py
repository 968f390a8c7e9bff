"""The dashboard's notices (what an action did, told on the page it returns to):
only the action makes one. A link's query (``?did=purge&n=...``) shows nothing;
a notice is a one-time cookie bound to the session it was made for, shown once;
another session's, or a forged one, shows nothing. Through the broker's ASGI app
in process, over a memory store.
"""

from __future__ import annotations

import re

from broker.http.ui.auth import NOTICE_COOKIE, Sessions
from tests.support.asgi import call
from tests.support.inprocess import run
from tests.support.store_files import snapshot
from tests.support.ui_forms import TOKEN, csrf, dashboard, login, post, told


async def shown(app: object, cookie: str, query: str = "", notice: str | None = None,
                path: str = "/ui/queues/q") -> bytes:
    cookies = f"osq_ui={cookie}" + ("" if notice is None else f"; {NOTICE_COOKIE}={notice}")
    status, body, _ = await call(app, "GET", path, query=query, headers={"cookie": cookies})
    assert status == 200, body[:300]
    return body


def test_a_link_cannot_make_a_notice() -> None:
    async def main() -> None:
        async with dashboard() as (_, app, store):
            cookie = await login(app)
            before = snapshot(store)
            for query in ("did=purge&n=99999999999", "did=purge&n=5", "did=pause",
                          "did=resume", "did=redrive&n=3", "did=cancel&cancelled=4",
                          "did=cancel&unknown=1"):
                for path in ("/ui/queues/q", "/ui/queues/q/jobs/j0000000002"):
                    body = await shown(app, cookie, query, path=path)
                    assert b'data-testid="done"' not in body, (path, query)
                    assert b"Purged" not in body and b"Paused:" not in body
            assert snapshot(store) == before

    run(main())


def test_a_notice_is_the_actions_own_shown_once_to_its_own_session() -> None:
    async def main() -> None:
        async with dashboard() as (_, app, _):
            cookie, other = await login(app), await login(app)
            status, _, headers = await post(app, "/ui/queues/q/pause",
                                            {"csrf": await csrf(app, cookie)}, cookie)
            assert status == 303
            set_cookie = headers[b"set-cookie"].decode()
            assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
            assert "Path=/ui" in set_cookie and "Max-Age=60" in set_cookie
            found = re.match(r"osq_notice=([^;]+)", set_cookie)
            assert found is not None
            notice = found.group(1)
            assert await told(app, cookie, headers) == \
                "Paused: no job is handed out until resumed."
            # another session's browser, a notice tampered with, one from another key
            assert b'data-testid="done"' not in await shown(app, other, notice=notice)
            body, _, mac = notice.rpartition(".")
            assert b'data-testid="done"' not in await shown(
                app, cookie, notice=f"{body}x.{mac}")
            nonce = Sessions(TOKEN).check(cookie)
            forged = Sessions("another-token").notice(nonce, {"did": "purge", "n": 9})
            assert b'data-testid="done"' not in await shown(app, cookie, notice=forged)
            assert b'data-testid="done"' not in await shown(app, cookie, notice="garbage")

    run(main())
