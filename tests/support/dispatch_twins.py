"""Two :class:`~broker.model.groups.dispatch.Dispatch` twins over one names table:
for tests that drive one call by call and the other by a batched call and then
compare them (set_heads against set_head, settled_many against settled)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from broker.model.groups.dispatch import Dispatch
from broker.model.groups.names import GroupNames
from broker.model.groups.settings import parse_group_settings


def dispatch_twins(raw: dict[str, Any],
                   names_known: Sequence[str | None]) -> tuple[Dispatch, Dispatch, GroupNames]:
    """Two dispatches under the group settings ``raw`` (as a queue's settings give
    them), sharing a names table in which ``names_known`` are interned in order."""
    names = GroupNames()
    for name in names_known:
        names.gid(name)
    group_settings = parse_group_settings(raw, "test")
    return Dispatch(group_settings, names), Dispatch(group_settings, names), names
