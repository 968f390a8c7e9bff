"""The web dashboard, served by the broker at ``/ui/`` (docs/dashboard.md).

Server-rendered pages (Jinja2 templates under ``templates/``) with htmx for
the parts that refresh themselves and uPlot for the charts, both vendored
under ``static/`` (see ``static/VENDORED.md``): no build step, no CDN.
:mod:`broker.http.ui.app` is the gate and the rendering,
:mod:`broker.http.ui.pages` the reads, :mod:`broker.http.ui.actions` the
changes; :data:`PAGES` is the table of routes.
"""

from __future__ import annotations

from broker.http.throttle import Guard
from broker.http.ui import actions, pages
from broker.http.ui.app import Page, Ui
from broker.http.ui.auth import SESSION_TTL_S
from broker.service.broker import Broker
from broker.service.dashboard import Dashboard
from broker.service.history import History
from broker.service.signouts import SignOuts

Q = "/ui/queues/{queue}"

#: Every route of the dashboard.
PAGES: tuple[Page, ...] = (
    Page("GET", "/ui", pages.to_overview, public=True),
    Page("GET", "/ui/", pages.overview),
    Page("GET", "/ui/fragments/queues", pages.queue_rows),
    Page("GET", Q, pages.queue_page),
    Page("GET", f"{Q}/summary", pages.summary),
    Page("GET", f"{Q}/groups", pages.groups),
    Page("GET", f"{Q}/table", pages.job_table),
    Page("GET", f"{Q}/history.json", pages.history),
    Page("GET", f"{Q}/jobs/{{job_id}}", pages.job_page),
    Page("GET", f"{Q}/purge", pages.purge_confirm),
    Page("POST", f"{Q}/redrive", actions.redrive, action=True),
    Page("POST", f"{Q}/purge", actions.purge, action=True),
    Page("POST", f"{Q}/cancel", actions.cancel, action=True),
    Page("POST", f"{Q}/pause", actions.pause, action=True),
    Page("POST", f"{Q}/resume", actions.resume, action=True),
    Page("GET", "/ui/login", pages.login_form, public=True),
    Page("POST", "/ui/login", actions.login, public=True),
    Page("POST", "/ui/logout", actions.logout),
    Page("GET", "/ui/static/{name}", pages.static, public=True),
)


def build_ui(broker: Broker, history: History, *, token: str | None,
             read_only: bool = False, guard: Guard | None = None) -> Ui:
    """The dashboard of ``broker``, its charts drawn from ``history``; with a
    ``token``, its sign-outs kept in the store (:mod:`broker.service.signouts`);
    ``guard``: the wrong-token throttle it shares with the API (default: its own)."""
    signouts = None if token is None else SignOuts(
        broker.store, broker.store_call, ttl_s=SESSION_TTL_S, clock=broker.clock,
        monotonic=broker.monotonic)
    return Ui(broker, Dashboard(broker, history), PAGES, token=token, read_only=read_only,
              advertise_url=broker.url, signouts=signouts, guard=guard)


__all__ = ["PAGES", "Page", "Ui", "build_ui"]
