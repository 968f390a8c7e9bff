"""The dashboard's sessions, CSRF tokens and origin checks.

**Sessions.** With a bearer token, a person signs in by typing it into the
login form; the answer sets the cookie ``osq_ui`` (``HttpOnly``,
``SameSite=Strict``, ``Path=/ui``, ``Secure`` over https) to a session value
``{issued}.{nonce}.{mac}``: when it was issued (s since the epoch), 16 random
bytes, and an HMAC-SHA256 of both under a key derived from the token. The
cookie never holds the token; every check is a constant-time compare; a
session lasts :data:`SESSION_TTL_S`; signing out revokes it, here at once
and on every broker of the store through the store's sign-out list
(:mod:`broker.service.signouts`, which the dashboard's gate consults); a new
token ends every session. Brokers sharing a token accept each other's sessions.
Without a token (a loopback-only dashboard) the key is drawn at random when
the broker starts, and a session is handed out with the first page.

**Notices.** What an action did is told on the page it returns to by a
one-time notice (a flash): the cookie ``osq_notice`` (same attributes, a
minute long) holding what the action reported and an HMAC binding it to
the session (:meth:`Sessions.notice`); the page shows it once and clears it.
A link cannot forge one: no query parameter makes a notice.

**CSRF.** Every state-changing form carries the session's CSRF token (an
HMAC of its nonce; :meth:`Sessions.csrf`), and :func:`same_origin` checks
the ``Origin`` (or ``Referer``) header of every POST against the dashboard's
own host. A request with ``Authorization: Bearer`` (a script) needs neither:
no browser adds that header to a cross-site request.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import orjson

#: The session cookie's name.
COOKIE = "osq_ui"
#: The one-time notice's cookie (see the module docstring), and how long it lasts (s).
NOTICE_COOKIE = "osq_notice"
NOTICE_TTL_S = 60
#: How long a session lasts (s).
SESSION_TTL_S = 12 * 3600
#: Sessions signed out before they expire, remembered until they would have.
MAX_REVOKED = 10_000
_LABEL = b"osqueue-ui-session-v1"


class Sessions:
    """Issue and check dashboard sessions (see the module docstring).

    ``token``: the broker's bearer token (None: no login; a random key).
    ``clock``: seconds since the epoch.
    """

    def __init__(self, token: str | None, *, clock: Callable[[], float] = time.time) -> None:
        secret = token.encode() if token else secrets.token_bytes(32)
        self._key = hmac.new(secret, _LABEL, hashlib.sha256).digest()
        self._token_digest = None if token is None else hashlib.sha256(token.encode()).digest()
        self._clock = clock
        self._revoked: dict[str, float] = {}  # nonce -> when its session expires

    def __repr__(self) -> str:
        return f"Sessions(login={self.needs_login})"

    @property
    def needs_login(self) -> bool:
        """Whether a person must give the token (the broker has one)."""
        return self._token_digest is not None

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the bearer token (constant time; False without one)."""
        if self._token_digest is None:
            return False
        digest = hashlib.sha256(given.encode("utf-8", "surrogatepass")).digest()
        return hmac.compare_digest(digest, self._token_digest)

    def _mac(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def issue(self) -> str:
        """A new session's cookie value."""
        body = f"{int(self._clock())}.{secrets.token_urlsafe(16)}"
        return f"{body}.{self._mac(body)}"

    def check(self, value: str | None) -> str | None:
        """The nonce of the session whose cookie value is ``value``, or None if it
        is missing, forged, expired or revoked."""
        if not value or len(value) > 200:
            return None
        body, _, mac = value.rpartition(".")
        issued, _, nonce = body.partition(".")
        if not issued.isdecimal() or not nonce or not hmac.compare_digest(
                mac.encode(), self._mac(body).encode()):
            return None
        age = self._clock() - int(issued)
        if not -60 <= age < SESSION_TTL_S or nonce in self._revoked:
            return None
        return nonce

    def revoke(self, value: str | None) -> None:
        """End the session of cookie ``value`` before it expires (signing out)."""
        nonce = self.check(value)
        if nonce is None or value is None:
            return
        now = self._clock()
        for old in [n for n, until in self._revoked.items() if until <= now]:
            del self._revoked[old]
        while len(self._revoked) >= MAX_REVOKED:  # the oldest expire first anyway
            del self._revoked[next(iter(self._revoked))]
        self._revoked[nonce] = int(value.partition(".")[0]) + SESSION_TTL_S

    def csrf(self, nonce: str) -> str:
        """The CSRF token of the session with ``nonce``."""
        return self._mac(f"csrf.{nonce}")[:32]

    def notice(self, nonce: str | None, told: dict[str, Any]) -> str:
        """A notice cookie's value telling ``told`` (JSON) to the session with
        ``nonce`` (None: a bearer-header visitor)."""
        body = base64.urlsafe_b64encode(orjson.dumps(told)).decode().rstrip("=")
        return f"{body}.{self._mac(f'notice.{nonce}.{body}')[:32]}"

    def read_notice(self, nonce: str | None, value: str | None) -> dict[str, Any] | None:
        """What the notice cookie ``value`` tells, if it was made for the session
        with ``nonce``; None if it is missing, forged or another session's."""
        if not value or len(value) > 2000:
            return None
        body, _, mac = value.rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(f"notice.{nonce}.{body}")[:32]
                                   .encode()):
            return None
        try:
            told = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (binascii.Error, ValueError):
            return None
        return told if isinstance(told, dict) else None

    def csrf_matches(self, nonce: str, given: str | None) -> bool:
        """Whether ``given`` is that session's CSRF token (constant time)."""
        return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"),
                                                         self.csrf(nonce).encode())


def issued_s(value: str) -> int:
    """When the session of cookie ``value`` was issued (s since the epoch); only for
    a value :meth:`Sessions.check` accepted."""
    return int(value.partition(".")[0])


def session_id(nonce: str) -> str:
    """A short name of a session for the log (not enough to forge or find it)."""
    return "s-" + hashlib.sha256(nonce.encode()).hexdigest()[:8]


def same_origin(origin: str | None, referer: str | None, own: Iterable[str]) -> bool:
    """Whether a POST comes from the dashboard's own pages: its ``Origin``
    header (else its ``Referer``'s origin) names one of the ``own`` host[:port]
    values (the request's ``Host``, the advertised URL's). A request with
    neither header passes here and rests on its CSRF token; ``Origin: null``
    (a sandboxed or privacy-stripped origin) does not pass."""
    source = origin if origin is not None else referer
    if source is None:
        return True
    try:
        parts = urlsplit(source)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    return parts.netloc.lower() in {o.lower() for o in own}


def cookie_header(value: str, *, secure: bool, max_age: int = SESSION_TTL_S,
                  name: str = COOKIE) -> str:
    """The ``Set-Cookie`` value for session cookie ``value`` (empty and
    ``max_age=0`` clears it); ``name``: another of the dashboard's cookies."""
    attrs = f"{name}={value}; Path=/ui; Max-Age={max_age}; HttpOnly; SameSite=Strict"
    return attrs + ("; Secure" if secure else "")
