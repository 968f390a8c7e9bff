"""The dashboard's ASGI app: routing, the gate every request passes, rendering.

Every request passes, in order: the loopback rule (a broker without a token
answers loopback clients under a loopback host name only, 403 otherwise:
the API's rule, :mod:`broker.http.hosts`; the host name check keeps a
DNS-rebinding page out); then, except for the login page and the static
files, a session (:mod:`broker.http.ui.auth`: the cookie, not signed out on
any broker of the store (:mod:`broker.service.signouts`), or an
``Authorization: Bearer`` header); then, for an action, the read-only switch
(403); then, for a POST, the origin check and the session's CSRF token.
Pages answer with a strict Content-Security-Policy (scripts and styles from
the dashboard itself only) and are never cached. Every value a template
prints has its control characters escaped (:func:`shown_text`).

Handlers live in :mod:`broker.http.ui.pages` (reads) and
:mod:`broker.http.ui.actions` (changes); each is ``(ui, request, visitor,
form) -> Response``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined, pass_context, select_autoescape
from jinja2.runtime import Context
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route, Router

from broker import timefmt
from broker.display import printable
from broker.errors import OsqueueError, shown
from broker.http.connections import Quiet
from broker.http.hosts import host_name, is_loopback
from broker.http.throttle import Guard
from broker.http.ui.auth import (
    COOKIE,
    Sessions,
    cookie_header,
    issued_s,
    same_origin,
    session_id,
)
from broker.service.broker import Broker
from broker.service.dashboard import Dashboard
from broker.service.signouts import CHECK_EVERY_S, SignOuts, session_key

log = logging.getLogger("osqueue.ui")

#: Most bytes of a form the dashboard reads (its forms are small).
MAX_FORM_BYTES = 64 * 1024
#: Most fields of a form (a page of selected jobs fits many times over).
MAX_FORM_FIELDS = 1000
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
_HEADERS = {"content-security-policy": CSP, "x-frame-options": "DENY",
            "x-content-type-options": "nosniff", "referrer-policy": "same-origin"}
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

Form = dict[str, list[str]]
#: Refusals of a form whose body was not read to its end.
_UNREAD = frozenset({408, 413})


class Refused(Exception):
    """A request the gate turns away: ``status`` and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Visitor(NamedTuple):
    """Who is asking. ``via``: ``session`` (signed in with the token), ``bearer``
    (an ``Authorization`` header), ``loopback`` (no token: a session handed out)."""

    nonce: str | None
    csrf: str
    via: str
    client: str

    @property
    def who(self) -> str:
        """Who asked, for the log: client address and how they are allowed in."""
        how = {"session": "token holder", "bearer": "token holder, bearer header",
               "loopback": "loopback, no token"}[self.via]
        session = f", session {session_id(self.nonce)}" if self.nonce else ""
        return f"{self.client} ({how}{session})"


Handler = Callable[["Ui", Request, Visitor, Form], Awaitable[Response]]


@dataclass(frozen=True)
class Page:
    """One route of the dashboard. ``action``: it changes a queue (refused when
    read-only); ``public``: served without a session (login, static files)."""

    method: str
    path: str
    handler: Handler
    action: bool = False
    public: bool = False


def _static_files() -> dict[str, tuple[bytes, str, str]]:
    """name -> (bytes, content type, short hash) of the files under static/."""
    out = {}
    for item in (resources.files("broker.http.ui") / "static").iterdir():
        suffix = "." + item.name.rpartition(".")[2]
        if item.is_file() and suffix in _TYPES:
            data = item.read_bytes()
            out[item.name] = (data, _TYPES[suffix], hashlib.sha256(data).hexdigest()[:12])
    return out


def number(value: int | None) -> str:
    """``1234567`` as ``1,234,567``; ``—`` for None."""
    return "—" if value is None else f"{value:,}"


def age(seconds: float | None) -> str:
    """A duration as a person reads it: ``42 s``, ``3 min 12 s``, ``2 h 5 min``, ``3 d 4 h``
    (``1 min``, not ``1 min 0 s``)."""
    if seconds is None:
        return "—"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f} s" if 0 < seconds < 10 else f"{s} s"
    if s < 3600:
        big, small = f"{s // 60} min", f"{s % 60} s" if s % 60 else ""
    elif s < 86400:
        big, small = f"{s // 3600} h", f"{s % 3600 // 60} min" if s % 3600 // 60 else ""
    else:
        big, small = f"{s // 86400} d", f"{s % 86400 // 3600} h" if s % 86400 // 3600 else ""
    return f"{big} {small}" if small else big


def relative(ms: int, now_ms: int) -> str:
    """When ``ms`` was, from ``now_ms``, as a person says it: ``just now``,
    ``42 s ago``, ``3 min ago``, ``2 h ago``, ``3 d ago``; ``in 5 s`` for a time to come.
    (dashboard.js says it the same way as the page stays open.)"""
    seconds = (now_ms - ms) / 1000
    if abs(seconds) < 1:
        return "just now"
    s = int(abs(seconds))
    text = f"{s} s" if s < 60 else f"{s // 60} min" if s < 3600 else \
        f"{s // 3600} h" if s < 86400 else f"{s // 86400} d"
    return f"{text} ago" if seconds > 0 else f"in {text}"


def utc_text(ms: int) -> str:
    """``ms`` as the exact UTC time a tooltip shows: ``2026-11-25 19:04:05.296 UTC``."""
    return timefmt.fmt(ms).replace("T", " ").replace("Z", " UTC")


@functools.lru_cache(maxsize=4096)
def _instant(iso: str) -> tuple[int, str, str] | None:
    """``iso`` (ISO-8601 text) as (ms, its canonical text, the tooltip's UTC text);
    None if it is not a time. (A page shows the same few instants many times.)"""
    try:
        ms = timefmt.parse(iso)
    except ValueError:
        return None
    return ms, timefmt.fmt(ms), utc_text(ms)


@pass_context
def when(context: Context, iso: str | None) -> Markup:
    """A time of the queue object (ISO-8601 UTC text) as ``<time>``: how long ago
    (or how soon) from the page's ``now_ms``, the exact UTC time on hover; ``—``
    for none (or the text, escaped, if it is not a time)."""
    if not iso:
        return Markup("—")
    found = _instant(iso)
    if found is None:
        return escape(printable(iso))
    ms, text, utc = found
    # (every part is digits, letters, '-', ':', '.' and spaces: nothing to escape)
    return Markup(f'<time datetime="{text}" title="{utc}">'
                  f'{relative(ms, context["now_ms"])}</time>')


def host_of(url: str | None) -> str:
    """The ``host:port`` of ``url`` (``""`` for none)."""
    try:
        return urlsplit(url).netloc if url else ""
    except ValueError:
        return ""


def rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def web_url(value: str | None) -> str:
    """``value`` if it is an http(s) URL (a broker's, read from a queue object, which
    anyone with write access to the store could have written), else ``#``."""
    return value if isinstance(value, str) and value.startswith(("http://", "https://")) \
        else "#"


def shown_text(value: Any) -> Any:
    """What a template prints of ``value``: a string with its control characters
    (NUL, escape sequences, bidi overrides: :func:`broker.display.printable`) written
    as visible escapes, then HTML-escaped by Jinja; HTML the templates made
    (``Markup``) as it is. Job keys, worker names, errors, payloads, settings and
    a store's broker URLs are anyone's text: none is shown raw."""
    return printable(value) if type(value) is str else value  # (Markup: a str subclass)


def text_lines(value: Any) -> Markup:
    """``value`` as a block of lines (an error, a payload in a ``<pre>``): its line
    breaks kept, every other control character escaped, HTML-escaped."""
    return escape(printable(str(value), keep_lines=True))


def host_header(request: Request) -> bytes | None:
    """The request's ``Host`` header as the throttle takes it (None: none)."""
    host = request.headers.get("host")
    return None if host is None else host.encode("latin-1")


def query_string(**params: Any) -> str:
    """``?a=1&b=2`` of the params that have a value (none: "")."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return "?" + urlencode(kept) if kept else ""


class Ui:
    """The dashboard of ``broker`` (see the module docstring).

    ``token``: the API's bearer token (None: loopback only, no login);
    ``read_only``: hide the actions and refuse them; ``advertise_url``: the
    broker's URL, whose host a POST's origin may also name; ``signouts``: the
    store's list of signed-out sessions (with a token: a sign-out lasts, and
    holds on every broker of the store); ``guard``: the wrong-token throttle
    (:mod:`broker.http.throttle`), shared with the API.
    """

    def __init__(self, broker: Broker, dashboard: Dashboard, pages: tuple[Page, ...], *,
                 token: str | None, read_only: bool = False,
                 advertise_url: str = "", signouts: SignOuts | None = None,
                 guard: Guard | None = None) -> None:
        self.broker = broker
        self.dashboard = dashboard
        self.sessions = Sessions(token)
        self.signouts = signouts
        self.guard = guard or Guard(broker.config.wrong_tokens_per_min,
                                    advertise_url=advertise_url)
        #: refusals any page can cause, one line a minute per kind at most
        self.quiet = Quiet(log)
        self.read_only = read_only
        own = urlsplit(advertise_url).netloc if advertise_url else ""
        self._own = {own} if own else set()
        self.static = _static_files()
        self.templates = Environment(
            loader=PackageLoader("broker.http.ui", "templates"),
            autoescape=select_autoescape(default=True), undefined=StrictUndefined,
            trim_blocks=True, lstrip_blocks=True, auto_reload=False, finalize=shown_text)
        self.templates.globals.update(static=self.static_url, qs=query_string)
        self.templates.filters.update(num=number, age=age, rate=rate, web=web_url,
                                      lines=text_lines, when=when, host=host_of)
        self.router = Router([Route(p.path, self._endpoint(p), methods=[p.method])
                              for p in pages], default=self._not_found)

    def __repr__(self) -> str:
        return f"Ui({self.broker.id!r}, login={self.sessions.needs_login}, " \
               f"read_only={self.read_only})"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.router(scope, receive, send)

    def static_url(self, name: str) -> str:
        return f"/ui/static/{name}?v={self.static[name][2]}"

    # -- the gate ------------------------------------------------------------------

    def _endpoint(self, page: Page) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await self._serve(page, request)

        return endpoint

    async def _not_found(self, scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        try:
            self._gate(request)
            response: Response = self.page(request, None, "error.html", 404,
                                           message="no such page", owner=None)
        except Refused as exc:
            response = self.plain(exc.status, exc.message)
        await response(scope, receive, send)

    def _gate(self, request: Request) -> None:
        """The loopback rule: without a token, loopback clients under a loopback
        host name only."""
        if self.sessions.needs_login:
            return
        client = request.client.host if request.client else ""
        if not is_loopback(client) or not is_loopback(
                host_name(request.headers.get("host", ""))):
            raise Refused(403, "this broker has no bearer token, so its dashboard answers "
                               "only on this machine (http://127.0.0.1:PORT/ui/); give the "
                               "broker a token to open it to others")

    async def _visitor(self, request: Request) -> tuple[Visitor | None, str | None]:
        """The visitor, and a new session's cookie value to set (no-token mode). A
        session signed out (on any broker of the store) is no session; one that
        cannot be checked raises ``StorageUnavailable`` (503)."""
        client = f"{request.client.host}:{request.client.port}" if request.client else "?"
        auth = request.headers.get("authorization")
        if auth is not None and self.sessions.needs_login:
            host = host_header(request)
            self.guard.check(request.scope.get("client"), host)  # throttled: 429, token unread
            scheme, _, given = auth.partition(" ")
            if scheme.lower() == "bearer" and self.sessions.token_matches(given.strip()):
                self.guard.vouch(host)
                return Visitor(None, "", "bearer", client), None
            self.guard.refused(request.scope.get("client"), f"ui: refused {request.method} "
                               f"{shown(request.url.path)} from {client}: wrong bearer token",
                               wrong=True, host=host)
            raise Refused(401, "wrong bearer token")
        cookie = request.cookies.get(COOKIE)
        nonce = self.sessions.check(cookie)
        if nonce is not None and cookie is not None and self.signouts is not None and \
                await self.signouts.signed_out(
                    session_key(nonce), issued_s(cookie),
                    max_age_s=0.0 if request.method == "POST" else CHECK_EVERY_S):
            nonce = None
        via = "session" if self.sessions.needs_login else "loopback"
        if nonce is not None:
            return Visitor(nonce, self.sessions.csrf(nonce), via, client), None
        if self.sessions.needs_login:
            return None, None
        value = self.sessions.issue()
        nonce = self.sessions.check(value)
        assert nonce is not None
        return Visitor(nonce, self.sessions.csrf(nonce), via, client), value

    async def _serve(self, page: Page, request: Request) -> Response:
        visitor: Visitor | None = None
        new_cookie = None
        try:
            self._gate(request)
            if page.public:
                response = await page.handler(self, request, Visitor(None, "", "", ""),
                                              await self._form(request))
                return self._finish(request, response, None)
            visitor, new_cookie = await self._visitor(request)
            if visitor is None:
                return self._to_login(request)
            form: Form = {}
            if request.method == "POST":
                if page.action and self.read_only:  # (whatever the form holds)
                    raise Refused(403, "this dashboard is read-only (--ui-read-only): "
                                       "it shows the queues and changes nothing")
                form = await self._form(request)
                self._check_post(request, visitor, form)
            response = await page.handler(self, request, visitor, form)
        except Refused as exc:
            response = self.page(request, visitor, "error.html", exc.status,
                                 message=exc.message, owner=None) \
                if exc.status != 401 or visitor is not None else self.plain(401, exc.message)
            if exc.status in _UNREAD:  # the rest of the body is not read: close
                response.headers["connection"] = "close"
        except OsqueueError as exc:
            response = self.page(request, visitor, "error.html", exc.status,
                                 message=exc.message, owner=exc.details.get("url"))
            if "retry_after_s" in exc.details:  # 429: too many wrong tokens
                response.headers["retry-after"] = str(exc.details["retry_after_s"])
        except Exception:  # never crash the broker on one request
            log.exception("ui: unexpected error serving %s %s", request.method,
                          shown(request.url.path))
            response = self.plain(500, "internal error")
        return self._finish(request, response, new_cookie)

    def _check_post(self, request: Request, visitor: Visitor, form: Form) -> None:
        """CSRF: the origin and the session's token (a bearer header needs neither)."""
        if visitor.via == "bearer":
            return
        if not self.same_origin(request):
            self.quiet.warning("cross-origin", f"ui: refused POST {shown(request.url.path)} "
                               f"from {visitor.client}: cross-origin (Origin "
                               f"{shown(request.headers.get('origin'))})")
            raise Refused(403, "refused: this form was not sent from this dashboard")
        given = (form.get("csrf") or [request.headers.get("x-csrf-token", "")])[0]
        if visitor.nonce is None or not self.sessions.csrf_matches(visitor.nonce, given):
            self.quiet.warning("csrf", f"ui: refused POST {shown(request.url.path)} from "
                                       f"{visitor.client}: missing or wrong CSRF token")
            raise Refused(403, "refused: the form's CSRF token is missing or stale; "
                               "reload the page and try again")

    def same_origin(self, request: Request) -> bool:
        own = {request.headers.get("host", "")} | self._own
        return same_origin(request.headers.get("origin"), request.headers.get("referer"), own)

    async def _form(self, request: Request) -> Form:
        """The urlencoded body of a POST (bounded), as name -> values; {} for a GET.

        The whole form must arrive within the broker's ``header_timeout_s`` (s) of
        its headers, else ``Refused`` 408: the login form is read before anything
        is checked, and a connection whose body is being read is never shed, so a
        client sending it a byte at a time would hold its connection for ever."""
        if request.method != "POST":
            return {}
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_FORM_BYTES:
            raise Refused(413, f"form is larger than {MAX_FORM_BYTES} bytes")
        body = b""
        deadline_s = self.broker.config.header_timeout_s
        try:
            async with asyncio.timeout(deadline_s):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > MAX_FORM_BYTES:
                        raise Refused(413, f"form is larger than {MAX_FORM_BYTES} bytes")
        except TimeoutError:
            raise Refused(408, f"the form did not arrive within {deadline_s:g} s") from None
        try:
            pairs = parse_qsl(body.decode(), keep_blank_values=True,
                              max_num_fields=MAX_FORM_FIELDS, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            raise Refused(400, "the form does not parse") from None
        form: Form = {}
        for name, value in pairs:
            form.setdefault(name, []).append(value)
        return form

    def _to_login(self, request: Request) -> Response:
        """Not signed in: a page goes to the login form; a fragment (htmx) or a
        POST is answered 401, htmx told to go to the login form."""
        target = "/ui/login?next=" + quote(request.url.path + (
            "?" + request.url.query if request.url.query else ""), safe="/")
        if request.method == "GET" and "hx-request" not in request.headers:
            return self._finish(request, RedirectResponse(target, 303), None)
        response = self.plain(401, "sign in first")
        response.headers["hx-redirect"] = target
        return self._finish(request, response, None)

    def _finish(self, request: Request, response: Response, new_cookie: str | None) -> Response:
        for name, value in _HEADERS.items():
            response.headers.setdefault(name, value)
        response.headers.setdefault("cache-control", "no-store")
        if new_cookie is not None:
            response.headers.append("set-cookie", cookie_header(new_cookie,
                                                                secure=self.secure(request)))
        return response

    @staticmethod
    def secure(request: Request) -> bool:
        return request.url.scheme == "https"

    # -- answers -------------------------------------------------------------------

    def page(self, request: Request, visitor: Visitor | None, template: str,
             status: int = 200, **context: Any) -> HTMLResponse:
        """``template`` rendered with ``context`` and what every page shows."""
        html = self.templates.get_template(template).render(
            visitor=visitor, read_only=self.read_only, needs_login=self.sessions.needs_login,
            broker_id=self.broker.id, broker_url=self.broker.url, status=status,
            now_ms=self.broker.clock(), **context)
        return HTMLResponse(html, status)

    @staticmethod
    def plain(status: int, message: str) -> Response:
        return Response(message + "\n", status, media_type="text/plain; charset=utf-8")
