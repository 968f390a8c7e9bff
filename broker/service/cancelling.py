"""The broker's cancel call: a part of :class:`broker.service.broker.Broker`
(which inherits it), kept apart because the coordinator is at its size limit.

The rules are :mod:`broker.model.cancels`'; this only routes the call to the
queue's commit loop, like the coordinator's other admin calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from broker.errors import InvalidRequest
from broker.limits import MAX_ITEMS
from broker.model.ops import Cancel
from broker.wire import CancelAnswer


class _Broker(Protocol):
    async def _existing(self, queue: str) -> None: ...

    async def _submit(self, queue: str, opname: str, op: Any, *,
                      create: bool = False) -> Any: ...


class CancelCalls:
    """:meth:`cancel`, for :class:`~broker.service.broker.Broker`."""

    async def cancel(self: _Broker, queue: str, ids: Sequence[str]) -> list[CancelAnswer]:
        """Cancel the jobs ``ids`` in one commit; one answer per id, in order,
        once durable (see :mod:`broker.model.cancels`: a pending or delayed job
        is cancelled, a claimed one marked, an unknown or finished one left as
        it is). Raises ``InvalidRequest`` for no ids or more than ``MAX_ITEMS``,
        ``UnknownQueue`` for a queue with no object, and what the commit raised."""
        if not 0 < len(ids) <= MAX_ITEMS:
            raise InvalidRequest(f"cancel needs 1..{MAX_ITEMS} job ids, got {len(ids)}")
        await self._existing(queue)
        result = await self._submit(queue, "cancel", Cancel(tuple(ids)))
        return list(result.view)
