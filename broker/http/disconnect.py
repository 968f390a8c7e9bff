"""A long-poll claim whose client goes away: stop waiting, hand back what it got.

ASGI tells an app that its client left by an ``http.disconnect`` message from
``receive()``; once the request body is read, that is the only message still
to come. :func:`claim_while_connected` watches for it (a task awaiting
``receive()``) while :meth:`Broker.claim <broker.service.broker.Broker.claim>`
waits, so that a client that timed out neither keeps a claim waiting for
``wait_s`` nor is leased the next job pushed. A claim committed all the same
(a job arrived as the client left, or its commit was in flight) is handed
back at once with :meth:`Broker.release
<broker.service.broker.Broker.release>`: its jobs are pending again,
the attempt not counted, and their tokens are stale.

Only a claim that may wait (``wait_s`` > 0) is watched: the other hot calls
answer within one commit and cost no task more.

uvicorn drops an answer sent to a connection it knows is closed, silently, so
the disconnect is looked for once more just before the answer is sent; and a
connection lost while the answer was being written (the client left, or read
so little that the send stall bound of :mod:`broker.http.connections` dropped
it) marks the request (:data:`~broker.http.connections.ANSWER_LOST`): then
:func:`hand_back_lost`, after the send, releases the jobs of any claim (long
poll or not) whose answer was not wholly written. What cannot be seen: a
client that leaves after its whole answer was handed to the socket (maybe
lost in flight) keeps its jobs until their leases expire, as any worker that
dies holding jobs does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from broker.errors import OsqueueError
from broker.http.connections import ANSWER_LOST
from broker.http.parsers import parse_request_key
from broker.http.route import Receive
from broker.model.ops import LeasedJob, LeasedJobs
from broker.service.broker import Broker

log = logging.getLogger("osqueue.http")


async def _disconnected(receive: Receive) -> None:
    """Return once ``receive()`` reports the client gone (or fails: the same)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass  # (nothing else is due once the body was read)
    except Exception as exc:  # a broken connection is a gone client
        log.debug("receive failed while a claim waited (%s); taking the client as gone", exc)


async def _left(watch: asyncio.Task[None]) -> bool:
    """Whether the client has gone, looked at after one turn of the event loop: a
    disconnect the server has already taken note of reaches ``watch`` only on
    that turn, and an answer sent before it would be dropped unseen."""
    await asyncio.sleep(0)
    return watch.done()


async def claim_while_connected(broker: Broker, queue: str, receive: Receive,
                                **claim: Any) -> Sequence[LeasedJob]:
    """``broker.claim(queue, **claim)`` for a client that may leave while it waits
    (call it after the request body was read): the wait ends when the client
    leaves, and jobs claimed for a client found gone are released and answered
    as none. A release that fails is logged: those jobs come back when their
    leases expire."""
    watch = asyncio.get_running_loop().create_task(_disconnected(receive))
    try:
        jobs = await broker.claim(queue, gone=watch, **claim)
        if not jobs or not await _left(watch):
            return jobs
        tokens = [job.token for job in jobs]
        try:
            await broker.release(queue, tokens, claim.get("request"))
        except OsqueueError as exc:
            log.warning("a claim on %s whose client left could not hand back its %d job(s) "
                        "(%s); they return when their leases expire", queue, len(tokens), exc)
        return LeasedJobs()
    finally:
        watch.cancel()


async def hand_back_lost(broker: Broker, queue: str, status: int, out: Any,
                         scope: dict[str, Any]) -> None:
    """After a claim's answer (``status``, ``out``) was sent: if its connection
    was lost before the answer was wholly written (``scope`` marked
    :data:`~broker.http.connections.ANSWER_LOST`), its client never had the
    jobs: release them under the claim's request key (nothing is released if
    a repeat of the claim was answered them meanwhile). A release that fails
    is logged: those jobs come back when their leases expire."""
    if status != 200 or not scope.get(ANSWER_LOST):
        return
    tokens = [job["token"] for job in out.get("jobs", ())]
    if not tokens:
        return
    request = parse_request_key(dict(scope["headers"]).get(b"idempotency-key"))
    try:
        count = await broker.release(queue, tokens, request)
    except OsqueueError as exc:
        log.warning("a claim on %s whose answer was lost unsent could not hand back its %d "
                    "job(s) (%s); they return when their leases expire", queue, len(tokens), exc)
        return
    log.info("a claim on %s whose answer its connection lost unsent handed back %d job(s)",
             queue, count)
