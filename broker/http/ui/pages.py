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
from broker.model import browse
from broker.model.cancels import FINISHED, RETRY, UNKNOWN
from broker.model.job import CANCELLED, CLAIMED, DEAD, PENDING, STATUSES, seq_of
from broker.wire import CANCEL_REQUESTED

#: Jobs a page of the browser shows unless asked otherwise.
PAGE_SIZE = 50
#: Statuses the purge form offers (completed jobs leave by themselves).
PURGEABLE = (PENDING, CLAIMED, DEAD)
#: What an action's redirect says it did (``?did=...&n=...``).
DONE = {"redrive": "Returned {n} dead job(s) to pending.", "purge": "Purged {n} job(s).",
        "pause": "Paused: no job is handed out until resumed.",
        "resume": "Resumed: jobs are handed out again."}
#: A cancel's answers, counted by status in its redirect (``?did=cancel&cancelled=2...``),
#: in the order they are told, each with what it means.
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
    return ui.page(request, visitor, "_queue_rows.html", queues=queues)


def _count(value: str) -> int | str:
    return int(value) if value.isdecimal() and len(value) < 12 else "some"


def _done(request: Request) -> str | None:
    """What the action whose redirect this is did, from its query (``did``, ``n``;
    for a cancel a count per answer status), in words; None if no action."""
    q = request.query_params
    did = q.get("did")
    if did == "cancel":
        told = [text.format(n=_count(q[status])) for status, text in CANCEL_TOLD
                if q.get(status, "0") != "0"]
        return "Cancel: " + ("; ".join(told) if told else "nothing to cancel") + "."
    if did not in DONE:
        return None
    return DONE[did].format(n=_count(q.get("n", "")))


async def queue_page(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue = request.path_params["queue"]
    q = request.query_params
    status = browse.check_status(q.get("status") or None)
    after, before = _seq(q.get("after"), "after"), _seq(q.get("before"), "before")
    limit = _limit(q.get("limit"))
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
    return ui.page(request, visitor, "queue.html", q=info, queue=queue, jobs=jobs,
                   shown_status=status, statuses=STATUSES, limit=limit,
                   find=found, message=message, done=_done(request), request_key=request_key(),
                   purgeable=PURGEABLE, history=ui.dashboard.history)


async def summary(ui: Ui, request: Request, visitor: Visitor, form: Form) -> Response:
    queue = request.path_params["queue"]
    info = await ui.dashboard.summary(queue)
    return ui.page(request, visitor, "_summary.html", q=info, queue=queue)


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
    return ui.page(request, visitor, "job.html", status, q=info, queue=queue, job=job,
                   job_id=job_id[:40], request_key=request_key(), done=_done(request))


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
