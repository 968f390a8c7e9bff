"""Queue states with job groups for the pure tests of per-group rules (rates,
limits across rebuilds): jobs pushed in named groups at :data:`T0`, and a
claim's jobs counted by group."""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.model import transitions as T
from broker.model.ops import Claim, Configure, NewJob, Push
from broker.model.state import QueueState
from tests.support.states import new_queue

#: The clock these tests start at (ms since the epoch).
T0 = 1_767_225_600_000
#: Leases far beyond every time the tests reach: only tokens and due times wake claims.
LEASE_MS = 600_000


def grouped_queue(groups: list[str | None], **group_settings: Any) -> QueueState:
    """A new queue configured with ``group_settings``, one job a group name in
    ``groups`` (payloads ``0``, ``1``, ...; None: no group) pushed at :data:`T0`."""
    state = new_queue(T0)
    T.apply(state, Configure(group_settings), T0)
    T.apply(state, Push(tuple(NewJob(b"%d" % i, group=g) for i, g in enumerate(groups))), T0)
    return state


def claim_groups(state: QueueState, n: int, now: int) -> Counter[str | None]:
    """Claim up to ``n`` jobs at ``now``: how many of each group were handed out."""
    got = T.apply(state, Claim("w", n, LEASE_MS), now).jobs
    return Counter(state.jobs[int(job.id[1:])].group for job in got)
