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

What cannot be seen: uvicorn drops an answer sent to a connection it knows is
closed, silently, so the disconnect is looked for once more just before the
answer is sent; a client that leaves after that (its answer handed to the
socket, maybe lost in flight) keeps its jobs until their leases expire, as
any worker that dies holding jobs does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from broker.errors import OsqueueError
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
