"""One route of the API, as the routes table (:mod:`broker.http.routes`) lists it and
the OpenAPI document (:mod:`broker.http.openapi`) describes it.

Apart from the table because the table's module imports the modules that need
these types (:mod:`~broker.http.openapi` the :class:`Route`,
:mod:`~broker.http.disconnect` ``Receive``): merged into it, they would import
it back, a cycle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request

from broker.service.broker import Broker

RequestKey = tuple["str | None", "int | None"]  # (Idempotency-Key, Idempotency-Floor)
#: The ASGI ``receive`` of a request whose body was read: what is left to come is
#: the client's ``http.disconnect`` (see :mod:`broker.http.disconnect`).
Receive = Callable[[], Awaitable[dict[str, Any]]]
HotHandler = Callable[[Broker, str, Any, RequestKey, "Receive | None"],
                      Awaitable[tuple[int, Any]]]
#: After a hot call's answer ``(status, body)`` was sent: ``(broker, queue, status,
#: body, scope)``, what the route does if its connection lost the answer unsent.
LostHandler = Callable[[Broker, str, int, Any, dict[str, Any]], Awaitable[None]]
#: ``(broker, request, body)``: ``body`` is the request validated by the route's
#: ``request`` model (None for a route without one); ``request.state.authorized``
#: says whether the caller gave the token (or none is required).
RestHandler = Callable[[Broker, Request, Any], Awaitable[Any]]

#: How a route's body arrives: decoded JSON, staged lines (bytes), or either by
#: its content type (``application/vnd.osqueue.staged`` for lines).
JSON, STAGED, JSON_OR_STAGED = "json", "staged", "json_or_staged"


@dataclass(frozen=True)
class Route:
    """One route of the API (see the module docstring for the two handler kinds)."""

    method: str
    path: str
    handler: HotHandler | RestHandler
    summary: str
    request: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    auth: bool = True
    hot: bool = False
    body: str = JSON
    keyed: bool = False  # takes Idempotency-Key and Idempotency-Floor
    query: type[BaseModel] | None = None
    media_type: str = "application/json"
    lost: LostHandler | None = None  # (hot routes) run after the answer was sent
