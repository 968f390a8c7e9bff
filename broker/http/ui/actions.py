"""The dashboard's actions (POST): redrive, purge, cancel, pause, resume;
signing in and out.

Each action calls the broker operation the HTTP API's route calls
(:class:`~broker.service.broker.Broker`'s ``redrive``, ``purge``, ``cancel``
and ``set_paused``), with the form's one-off idempotency key where the
API takes one (a form sent twice is answered what the first one was; a cancel
takes none, and needs none: cancelling again changes nothing), logs one line
naming the action, the queue, what it did and who asked (``ui action purge
queue=q statuses=dead purged=3 by=127.0.0.1:50000 (token holder, session
s-...)``), and answers with a redirect back to the page, with a one-time
notice of what it did (a signed cookie bound to the session, see
:mod:`broker.http.ui.auth`: ``n`` jobs, or a cancel's answers counted by
status), which that page tells in words. The gate (:mod:`broker.http.ui.app`)
has checked the session, the origin, the CSRF token and the read-only switch
before any of them runs.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from broker.errors import InvalidRequest, shown
from broker.http import parsers
from broker.http.ui.app import Form, Refused, Ui, Visitor, host_header
from broker.http.ui.auth import (
    COOKIE,
    NOTICE_COOKIE,
    NOTICE_TTL_S,
    cookie_header,
    issued_s,
    session_id,
)
from broker.http.ui.pages import CANCEL_TOLD, PURGEABLE, safe_next
from broker.model.job import seq_of
from broker.service.signouts import session_key

log = logging.getLogger("osqueue.ui")

#: Most jobs one redrive or cancel of selected jobs names (a browser page holds 200).
MAX_SELECTED = 1000


def _one(form: Form, name: str) -> str | None:
    values = form.get(name)
    return values[0] if values else None


def _key(form: Form) -> str | None:
    raw = _one(form, "request")
    return parsers.parse_request_key(raw.encode()) if raw else None


def _back(ui: Ui, request: Request, visitor: Visitor, form: Form, queue: str, did: str,
          n: int | None = None, counts: dict[str, int] | None = None) -> Response:
    """Back to the page the form was on (a dashboard path), with the one-time
    notice of what was done (``did``: ``n`` jobs, or ``counts`` by name)."""
    target = safe_next(_one(form, "back"))
    if target == "/ui/":
        target = f"/ui/queues/{queue}"
    told: dict[str, object] = {"did": did}
    if n is not None:
        told["n"] = n
    if counts is not None:
        told["counts"] = counts
    response = RedirectResponse(target, 303)
    response.headers.append("set-cookie", cookie_header(
        ui.sessions.notice(visitor.nonce, told), secure=ui.secure(request),
        max_age=NOTICE_TTL_S, name=NOTICE_COOKIE))
    return response


def _ids(form: Form, what: str) -> list[str]:
    """The job ids a form names (``ids``): 1..:data:`MAX_SELECTED` of them."""
    ids = form.get("ids", [])
    if not ids:
        raise InvalidRequest(f"choose the jobs to {what}")
    if len(ids) > MAX_SELECTED or any(seq_of(i) is None for i in ids):
        raise InvalidRequest(f"ids must be at most {MAX_SELECTED} job ids, got {shown(ids)}")
    return ids


def _listed(ids: list[str]) -> str:
    """Job ids for a log line (the first 20)."""
    return ",".join(ids[:20]) + ("..." if len(ids) > 20 else "")


async def redrive(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue = request.path_params["queue"]
    every = _one(form, "all") == "yes"
    ids = [] if every else _ids(form, "redrive, or redrive all dead jobs")
    count = await ui.broker.redrive(queue, None if every else ids, _key(form))
    what = "all dead" if every else _listed(ids)
    log.info("ui action redrive queue=%s ids=%s redriven=%d by=%s", queue, what, count,
             visitor.who)
    return _back(ui, request, visitor, form, queue, "redrive", count)


async def purge(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue = request.path_params["queue"]
    statuses = form.get("status", [])
    if not statuses or any(s not in PURGEABLE for s in statuses):
        raise InvalidRequest(f"purge wants status {', '.join(PURGEABLE)}; got "
                             f"{shown(statuses)}")
    if _one(form, "confirm") != "yes":
        raise InvalidRequest("a purge must be confirmed (its confirmation page sends "
                             "confirm=yes)")
    count = await ui.broker.purge(queue, statuses, _key(form))
    log.info("ui action purge queue=%s statuses=%s purged=%d by=%s", queue,
             ",".join(statuses), count, visitor.who)
    return _back(ui, request, visitor, form, queue, "purge", count)


async def cancel(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    """Cancel the jobs the form names (``ids``): a pending or delayed job is
    cancelled, a claimed one marked (see
    :meth:`~broker.service.broker.Broker.cancel`); the redirect counts the
    answers by status, which the page tells in words."""
    queue = request.path_params["queue"]
    ids = _ids(form, "cancel")
    answers = await ui.broker.cancel(queue, ids)
    counts = dict.fromkeys((status for status, _ in CANCEL_TOLD), 0)
    for answer in answers:
        if answer.status in counts:
            counts[answer.status] += 1
    log.info("ui action cancel queue=%s ids=%s %s by=%s", queue, _listed(ids),
             " ".join(f"{status}={n}" for status, n in counts.items()), visitor.who)
    return _back(ui, request, visitor, form, queue, "cancel",
                 counts={s: n for s, n in counts.items() if n})


async def pause(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue = request.path_params["queue"]
    await ui.broker.set_paused(queue, True)
    log.info("ui action pause queue=%s by=%s", queue, visitor.who)
    return _back(ui, request, visitor, form, queue, "pause")


async def resume(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue = request.path_params["queue"]
    await ui.broker.set_paused(queue, False)
    log.info("ui action resume queue=%s by=%s", queue, visitor.who)
    return _back(ui, request, visitor, form, queue, "resume")


async def login(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    """Check the token typed in; on a match, start a session (the cookie)."""
    if not ui.sessions.needs_login:
        return RedirectResponse("/ui/", 303)
    target = safe_next(_one(form, "next"))
    client = f"{request.client.host}:{request.client.port}" if request.client else "?"
    if not ui.same_origin(request):
        ui.quiet.warning("login cross-origin", f"ui: refused login from {client}: cross-origin")
        raise Refused(403, "refused: this form was not sent from this dashboard")
    host = host_header(request)
    ui.guard.check(request.scope.get("client"), host)  # throttled: 429, the token is not read
    if not ui.sessions.token_matches(_one(form, "token") or ""):
        ui.guard.refused(request.scope.get("client"), f"ui: refused login from {client}: "
                         "wrong token", wrong=True, host=host)
        return ui.page(request, None, "login.html", 401, next=target,
                       error="Wrong token: that is not the bearer token of this broker.")
    ui.guard.vouch(host)
    response = RedirectResponse(target, 303)
    value = ui.sessions.issue()
    nonce = ui.sessions.check(value)
    if ui.signouts is not None and nonce is not None:  # (just issued: not signed out)
        ui.signouts.vouch(session_key(nonce), issued_s(value))
    response.headers.append("set-cookie", cookie_header(value, secure=ui.secure(request)))
    log.info("ui: %s signed in", client)
    return response


async def logout(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    """End the session: with a token, first in the store's sign-out list, so that
    it holds on every broker of the store and after a restart (a sign-out that
    cannot be recorded fails, and the session stays open to try again); then here."""
    value = request.cookies.get(COOKIE)
    nonce = ui.sessions.check(value)
    if nonce is not None and value is not None and ui.signouts is not None:
        await ui.signouts.record(session_key(nonce), issued_s(value))
        log.info("ui: %s signed out (session %s, in the store's sign-out list)",
                 visitor.client, session_id(nonce))
    ui.sessions.revoke(value)
    response = RedirectResponse("/ui/login" if ui.sessions.needs_login else "/ui/", 303)
    response.headers.append("set-cookie", cookie_header("", secure=ui.secure(request),
                                                        max_age=0))
    return response
