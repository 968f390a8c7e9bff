"""The dashboard's sessions and origin checks (broker.http.ui.auth), without a server:
a session cookie is an HMAC-derived value that never holds the token, is refused
once forged, expired, revoked or made under another token, and carries its own
CSRF token; a POST's origin must be the dashboard's own."""

from __future__ import annotations

import pytest

from broker.http.ui import auth
from broker.http.ui.auth import SESSION_TTL_S, Sessions, cookie_header, same_origin

TOKEN = "s3cr3t-token-for-the-ui-tests"


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_cookie_checks_and_never_holds_the_token() -> None:
    sessions = Sessions(TOKEN)
    value = sessions.issue()
    assert sessions.check(value) is not None
    assert TOKEN not in value and TOKEN.encode().hex() not in value
    assert TOKEN not in repr(sessions)
    assert sessions.issue() != value  # a fresh nonce each time


@pytest.mark.parametrize("forge", [
    lambda v: v[:-1] + ("0" if v[-1] != "0" else "1"),  # the mac changed
    lambda v: str(int(v.split(".")[0]) + 1) + v[v.index("."):],  # the issue time moved
    lambda v: v.split(".")[0] + ".othernonce." + v.split(".")[2],  # another nonce
    lambda v: "",
    lambda v: "garbage",
    lambda v: "x" * 500,
])
def test_a_forged_or_mangled_session_cookie_is_refused(forge: object) -> None:
    sessions = Sessions(TOKEN)
    assert sessions.check(forge(sessions.issue())) is None  # type: ignore[operator]


def test_a_session_ends_when_it_expires_when_revoked_and_when_the_token_changes() -> None:
    clock = Clock()
    sessions = Sessions(TOKEN, clock=clock)
    value = sessions.issue()
    clock.now += SESSION_TTL_S - 1
    assert sessions.check(value) is not None
    clock.now += 2
    assert sessions.check(value) is None

    fresh = sessions.issue()
    sessions.revoke(fresh)
    assert sessions.check(fresh) is None
    assert Sessions("another-token").check(sessions.issue()) is None
    # brokers sharing the token accept each other's sessions
    assert Sessions(TOKEN, clock=clock).check(sessions.issue()) is not None


def test_revoked_sessions_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "MAX_REVOKED", 3)
    sessions = Sessions(TOKEN)
    values = [sessions.issue() for _ in range(5)]
    for value in values:
        sessions.revoke(value)
    assert len(sessions._revoked) == 3


def test_without_a_token_the_key_is_random_and_no_token_matches() -> None:
    a, b = Sessions(None), Sessions(None)
    assert not a.needs_login
    assert b.check(a.issue()) is None
    assert not a.token_matches("") and not a.token_matches("anything")


def test_the_token_is_compared_whole() -> None:
    sessions = Sessions(TOKEN)
    assert sessions.token_matches(TOKEN)
    assert not sessions.token_matches(TOKEN[:-1])
    assert not sessions.token_matches(TOKEN + "x")
    assert not sessions.token_matches("")


def test_each_session_has_its_own_csrf_token() -> None:
    sessions = Sessions(TOKEN)
    one, two = (sessions.check(sessions.issue()) for _ in range(2))
    assert one is not None and two is not None
    assert sessions.csrf_matches(one, sessions.csrf(one))
    assert not sessions.csrf_matches(one, sessions.csrf(two))
    assert not sessions.csrf_matches(one, None)
    assert not sessions.csrf_matches(one, "")


@pytest.mark.parametrize(("origin", "referer", "ok"), [
    ("http://127.0.0.1:8765", None, True),
    ("http://127.0.0.1:8765", "http://evil.example/", True),  # Origin wins
    (None, "http://127.0.0.1:8765/ui/queues/q", True),
    (None, None, True),  # rests on the CSRF token
    ("http://evil.example", None, False),
    ("http://127.0.0.1:8766", None, False),
    ("null", None, False),
    (None, "http://evil.example/ui/", False),
    ("file://", None, False),
    ("http://[::1", None, False),
])
def test_same_origin(origin: str | None, referer: str | None, ok: bool) -> None:
    assert same_origin(origin, referer, {"127.0.0.1:8765"}) is ok


def test_the_cookie_is_http_only_same_site_strict_and_secure_over_https() -> None:
    header = cookie_header("v", secure=False)
    assert "HttpOnly" in header and "SameSite=Strict" in header and "Path=/ui" in header
    assert "Secure" not in header
    assert "; Secure" in cookie_header("v", secure=True)
    assert "Max-Age=0" in cookie_header("", secure=False, max_age=0)
