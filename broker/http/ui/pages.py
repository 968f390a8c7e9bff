"""The dashboard's pages (GET): the overview, a queue's page with its job
browser, a job's page, the purge confirmation, and the fragments and data
the pages poll for (htmx every few seconds; the charts' JSON).

Each reads through :class:`broker.service.dashboard.Dashboard`; none changes
anything. Query values that do not parse are refused with 422 and a line
saying which.
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from broker import paths
from broker.errors import InvalidRequest, shown
from broker.http.ui.app import Form, Ui, Visitor
from broker.http.ui.auth import NOTICE_COOKIE, cookie_header
from broker.model import browse
from broker.model.cancels import FINISHED, RETRY, UNKNOWN
from broker.model.job import CANCELLED, CLAIMED, DEAD, PENDING, STATUSES, seq_of
from broker.wire import CANCEL_REQUESTED

#: Jobs a page of the browser shows unless asked otherwise.
PAGE_SIZE = 50
#: Statuses the purge form offers (completed jobs leave by themselves).
PURGEABLE = (PENDING, CLAIMED, DEAD)
#: What an action's notice says it did (``did``, ``n``: see :mod:`broker.http.ui.actions`).
DONE = {"redrive": "Returned {n} dead job(s) to pending.", "purge": "Purged {n} job(s).",
        "pause": "Paused: no job is handed out until resumed.",
        "resume": "Resumed: jobs are handed out again."}
#: A cancel's answers, counted by status in its notice, in the order they are told,
#: each with what it means.
CANCEL_TOLD = (
    (CANCELLED, "{n} cancelled"),
    (CANCEL_REQUESTED, "{n} cancel requested (claimed: it ends cancelled at its worker's next "
                       "heartbeat, complete or fail, or when its lease runs out)"),
    (FINISHED, "{n} already finished (completed, dead, or gone from the queue): left as it was"),
    (UNKNOWN, "{n} unknown: no such job"),
    (RETRY, "{n} not cancelled: its segment's jobs were not loaded; cancel it again"),
)


def request_key() -> str:
    """A fresh idempotency key for one rendered form: a resubmitted form (a
    double click, the back button) is answered what the first one was."""
    return "ui-" + secrets.token_hex(12)


def _seq(value: str | None, name: str) -> int | None:
    """A cursor: a job id (``j0000000042``) or a seq (``42``)."""
    if not value:
        return None
    seq = int(value) if value.isdecimal() and len(value) <= 15 else seq_of(value)
    if seq is None:
        raise InvalidRequest(f"{name} must be a job id or a seq, got {shown(value)}")
    return seq


def _limit(value: str | None) -> int:
    if not value:
        return PAGE_SIZE
    if not value.isdecimal() or not 1 <= int(value) <= browse.MAX_PAGE:
        raise InvalidRequest(f"limit must be 1..{browse.MAX_PAGE}, got {shown(value)}")
    return int(value)


async def overview(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queues = await ui.dashboard.overview()
    return ui.page(request, visitor, "overview.html", queues=queues)


async def queue_rows(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queues = await ui.dashboard.overview()
    return ui.page(request, visitor, "_overview.html", queues=queues)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _done(ui: Ui, request: Request, visitor: Visitor) -> str | None:
    """What the action that sent the visitor here did, in words, from its one-time
    notice (made by the action for this session; never from the query, which a
    link could forge); None without one."""
    told = ui.sessions.read_notice(visitor.nonce, request.cookies.get(NOTICE_COOKIE))
    did = None if told is None else told.get("did")
    if told is None or not isinstance(did, str):
        return None
    if did == "cancel":
        counts = told.get("counts")
        counts = counts if isinstance(counts, dict) else {}
        said = [text.format(n=_count(counts.get(status))) for status, text in CANCEL_TOLD
                if _count(counts.get(status))]
        return "Cancel: " + ("; ".join(said) if said else "nothing to cancel") + "."
    if did not in DONE:
        return None
    return DONE[did].format(n=_count(told.get("n")))


def _told(ui: Ui, request: Request, response: Response) -> Response:
    """``response``, clearing the notice cookie if the request had one (shown once)."""
    if NOTICE_COOKIE in request.cookies:
        response.headers.append("set-cookie", cookie_header(
            "", secure=ui.secure(request), max_age=0, name=NOTICE_COOKIE))
    return response


def _browsing(request: Request) -> tuple[str | None, int | None, int | None, int]:
    """The job browser's status filter, seq cursors (after, before) and page size,
    from the query (``InvalidRequest`` naming the value that does not parse)."""
    q = request.query_params
    status = browse.check_status(q.get("status") or None)
    after, before = _seq(q.get("after"), "after"), _seq(q.get("before"), "before")
    return status, after, before, _limit(q.get("limit"))


async def queue_page(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue = request.path_params["queue"]
    q = request.query_params
    status, after, before, limit = _browsing(request)
    info = await ui.dashboard.summary(queue)
    found = q.get("find", "").strip()
    message = None
    if found and info["served"]:
        job_id = await ui.dashboard.view(queue, "find", found[:300])
        if job_id is None and seq_of(found) is not None:
            job_id = found  # (not in the queue object: its page looks in the archive)
        if job_id is not None:
            return RedirectResponse(f"/ui/queues/{queue}/jobs/{job_id}", 303)
        message = (f"No job with id or key {shown(found)} in {queue}: a key is kept for the "
                   "dedup window only (a finished job is found by its id).")
    jobs = None
    if info["served"]:
        jobs = await ui.dashboard.view(queue, "page", status, after, before, limit)
    groups = await ui.dashboard.groups(queue)
    return _told(ui, request, ui.page(
        request, visitor, "queue.html", q=info, queue=queue, jobs=jobs, groups=groups,
        shown_status=status,
        statuses=STATUSES, limit=limit, after=after, before=before, find=found,
        message=message, done=_done(ui, request, visitor), request_key=request_key(),
        purgeable=PURGEABLE, history=ui.dashboard.history,
        samples=len(ui.dashboard.history.samples(queue))))


async def job_table(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    """The job browser's table as the queue page shows it (the same query), which
    the page fetches again every 5 s: the rows change as the queue does."""
    queue = request.path_params["queue"]
    status, after, before, limit = _browsing(request)
    info = await ui.dashboard.about(queue)
    if not info["served"]:
        return Response(status_code=204)  # (served elsewhere now: the page says so on reload)
    jobs = await ui.dashboard.view(queue, "page", status, after, before, limit)
    return ui.page(request, visitor, "_job_table.html", q=info, queue=queue, jobs=jobs,
                   shown_status=status, limit=limit, after=after, before=before)


async def summary(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue = request.path_params["queue"]
    info = await ui.dashboard.summary(queue)
    return ui.page(request, visitor, "_summary.html", q=info, queue=queue)


async def groups(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    """The queue page's Groups panel (empty while the queue uses no groups), which
    the page fetches again every 5 s."""
    queue = paths.check_queue_name(request.path_params["queue"])
    return ui.page(request, visitor, "_groups.html", queue=queue,
                   groups=await ui.dashboard.groups(queue))


async def history(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue = paths.check_queue_name(request.path_params["queue"])
    return JSONResponse(ui.dashboard.history.series(queue))  # (none for a queue not served here)


async def job_page(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue, job_id = request.path_params["queue"], request.path_params["job_id"]
    info = await ui.dashboard.about(queue)
    job: dict[str, Any] | None = None
    if info["served"]:
        job = await ui.dashboard.view(queue, "job", queue, job_id)
        if job is None and seq_of(job_id) is not None:
            job = await ui.dashboard.archived(queue, job_id)  # finished, left the queue
    status = 200 if job is not None or not info["served"] else 404
    return _told(ui, request, ui.page(
        request, visitor, "job.html", status, q=info, queue=queue, job=job,
        job_id=job_id[:40], request_key=request_key(), done=_done(ui, request, visitor)))


async def purge_confirm(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue = request.path_params["queue"]
    statuses = request.query_params.getlist("status")
    bad = [s for s in statuses if s not in PURGEABLE]
    if not statuses or bad:
        raise InvalidRequest(f"purge wants status {', '.join(PURGEABLE)}; got "
                             f"{shown(bad or statuses)}")
    info = await ui.dashboard.summary(queue)
    counts = (info["s"] or {}).get("counts", {})
    return ui.page(request, visitor, "purge.html", q=info, queue=queue, statuses=statuses,
                   count=sum(counts.get(s, 0) for s in statuses), request_key=request_key())


async def to_overview(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    return RedirectResponse("/ui/", 307)


async def login_form(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    if not ui.sessions.needs_login:
        return RedirectResponse("/ui/", 303)
    return ui.page(request, None, "login.html", next=safe_next(request.query_params.get("next")),
                   error=None)


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a dashboard path, never another site."""
    if not value or not value.startswith("/ui/") or value.startswith("//") or "\\" in value:
        return "/ui/"
    return value[:500]


async def static(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    found = ui.static.get(request.path_params["name"])
    if found is None:
        return ui.plain(404, "no such file")
    data, media_type, _ = found
    return Response(data, media_type=media_type,
                    headers={"cache-control": "public, max-age=86400"})
