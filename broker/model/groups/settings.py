"""The group settings of a queue, checked in one place and frozen.

Seven queue settings (docs/groups.md; absent means the default):

============================  =================================================
``group_limit``               null (unlimited, the default) or an int 0..1,000,000:
                              the most jobs of one group claimed at once (0: none)
``group_limits``              ``{group: int 0..1,000,000 or null}``: per-group overrides
``group_weights``             ``{group: int 1..1,000}``: turns per round (default 1)
``group_order``               ``"fair"`` (default) or ``"fifo"`` (one claimed job per
                              group, claimed in push order)
``group_dead``                ``"skip"`` (default) or ``"hold"``: whether a dead job of
                              a fifo group stops the group (ignored in fair order)
``group_rate_per_s``          0..1,000,000 (0: no per-group rate), a token bucket per group
``group_burst``               0..10,000,000 (0: one second's worth, at least 1)
============================  =================================================

The two maps hold at most :data:`~broker.limits.MAX_GROUP_KEYS` keys together
and the seven settings at most :data:`~broker.limits.MAX_GROUP_SETTINGS_BYTES`
as JSON; their keys are group names (:func:`broker.model.groups.names.check_group`).
With ``group_order: "fifo"`` a limit above 1 (``group_limit``, or any value of
``group_limits``, where null means unlimited) is refused: a fifo group has at
most one claimed job. Jobs without a group (gid 0) are never limited, weighted,
fifo or rate-limited.

Pure: imports the broker's errors, fields and limits, and the group names and buckets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import orjson

from broker.errors import InvalidRequest, shown
from broker.fields import integer, number
from broker.limits import (
    MAX_GROUP_BURST,
    MAX_GROUP_KEYS,
    MAX_GROUP_LIMIT,
    MAX_GROUP_RATE_PER_S,
    MAX_GROUP_SETTINGS_BYTES,
    MAX_GROUP_WEIGHT,
)
from broker.model.groups.buckets import GroupRate
from broker.model.groups.names import check_group

#: The settings' names, in the order the head writes them.
GROUP_SETTINGS = ("group_limit", "group_limits", "group_weights", "group_order",
                  "group_dead", "group_rate_per_s", "group_burst")
ORDERS = ("fair", "fifo")
DEADS = ("skip", "hold")

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """A queue's group settings, checked (:func:`parse_group_settings`). The
    maps are read-only. The defaults: no limit, weight 1, fair order, dead
    jobs skipped, no per-group rate."""

    limit: int | None = None
    limits: Mapping[str, int | None] = field(default_factory=lambda: _EMPTY)
    weights: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    order: Literal["fair", "fifo"] = "fair"
    dead: Literal["skip", "hold"] = "skip"
    rate_per_s: float = 0.0
    burst: int = 0

    def limit_of(self, name: str | None) -> int | None:
        """The most claimed jobs of group ``name`` at once (None: unlimited).
        No group (None) is never limited; in fifo order the limit is
        ``min(1, configured)`` (1 where none is configured)."""
        if name is None:
            return None
        configured = self.limits.get(name, self.limit)
        if self.order == "fifo":
            return 1 if configured is None else min(1, configured)
        return configured

    def weight_of(self, name: str | None) -> int:
        """Group ``name``'s weight (turns per round); 1 for no group."""
        return 1 if name is None else self.weights.get(name, 1)

    @property
    def fifo(self) -> bool:
        return self.order == "fifo"

    @property
    def holds_dead(self) -> bool:
        """Whether a dead job stops its group (fifo order with ``group_dead: "hold"``)."""
        return self.order == "fifo" and self.dead == "hold"

    @property
    def rate(self) -> GroupRate | None:
        """The per-group token bucket's rate (None: no per-group rate)."""
        return GroupRate.of(self.rate_per_s, self.burst)

    @property
    def active(self) -> bool:
        """Whether any setting is not at its default (the queue uses group settings)."""
        return self != DEFAULT

    def stored(self) -> dict[str, Any]:
        """The settings as the head holds them: only those not at their default,
        under their setting names (``parse_group_settings(s.stored(), ...) == s``)."""
        out: dict[str, Any] = {}
        for name, value, default in zip(GROUP_SETTINGS, self._values(), DEFAULT._values(),
                                        strict=True):
            if value != default:
                out[name] = dict(value) if isinstance(value, Mapping) else value
        return out

    def _values(self) -> tuple[Any, ...]:
        return (self.limit, self.limits, self.weights, self.order, self.dead,
                self.rate_per_s, self.burst)


DEFAULT = GroupSettings()


def _limit(value: Any, what: str, error: type[InvalidRequest]) -> int | None:
    if value is None:
        return None
    return integer(what, value, 0, MAX_GROUP_LIMIT, error)


def _map(raw: Mapping[str, Any], name: str, where: str,
         error: type[InvalidRequest]) -> Mapping[str, Any] | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise error(f"{where}: {name} must be an object of group to value, got {shown(value)}")
    return value


def parse_group_settings(raw: Mapping[str, Any], where: str,
                         error: type[InvalidRequest] = InvalidRequest) -> GroupSettings:
    """The group settings among ``raw`` (a queue's settings: other names are
    not looked at; an absent or null setting is its default, but for
    ``group_limit``, where null is the default). Raises ``error``
    (``InvalidRequest``: 422 ``invalid_request``) for the first bad value, one
    line beginning with ``where`` and naming the setting, and for a map's entry
    its key, values quoted by a short prefix (:func:`broker.errors.shown`)."""
    limits_raw = _map(raw, "group_limits", where, error)
    weights_raw = _map(raw, "group_weights", where, error)
    keys = len(limits_raw or ()) + len(weights_raw or ())
    if keys > MAX_GROUP_KEYS:
        raise error(f"{where}: group_limits and group_weights hold {keys} groups together; "
                    f"at most {MAX_GROUP_KEYS} are allowed")
    limit = _limit(raw.get("group_limit"), f"{where}: group_limit", error)
    limits: dict[str, int | None] = {}
    for key, value in (limits_raw or {}).items():
        check_group(key, f"{where}: group_limits", error)
        limits[key] = _limit(value, f"{where}: group_limits[{shown(key)}]", error)
    weights: dict[str, int] = {}
    for key, value in (weights_raw or {}).items():
        check_group(key, f"{where}: group_weights", error)
        weights[key] = integer(f"{where}: group_weights[{shown(key)}]", value, 1,
                               MAX_GROUP_WEIGHT, error)
    order_raw, dead_raw = raw.get("group_order"), raw.get("group_dead")
    if order_raw is not None and order_raw not in ORDERS:
        raise error(f"{where}: group_order must be one of {list(ORDERS)}, got {shown(order_raw)}")
    if dead_raw is not None and dead_raw not in DEADS:
        raise error(f"{where}: group_dead must be one of {list(DEADS)}, got {shown(dead_raw)}")
    order: Literal["fair", "fifo"] = "fifo" if order_raw == "fifo" else "fair"
    dead: Literal["skip", "hold"] = "hold" if dead_raw == "hold" else "skip"
    rate = raw.get("group_rate_per_s")
    rate = 0.0 if rate is None else float(
        number(f"{where}: group_rate_per_s", rate, 0, MAX_GROUP_RATE_PER_S, error))
    burst = raw.get("group_burst")
    burst = 0 if burst is None else integer(f"{where}: group_burst", burst, 0,
                                            MAX_GROUP_BURST, error)
    if order == "fifo":
        _check_fifo(limit, limits, where, error)
    settings = GroupSettings(limit, MappingProxyType(limits) if limits else _EMPTY,
                             MappingProxyType(weights) if weights else _EMPTY,
                             order, dead, rate, burst)
    size = len(orjson.dumps(settings.stored()))
    if size > MAX_GROUP_SETTINGS_BYTES:
        raise error(f"{where}: the group settings take {size} bytes as JSON; at most "
                    f"{MAX_GROUP_SETTINGS_BYTES} are allowed")
    return settings


def _check_fifo(limit: int | None, limits: Mapping[str, int | None], where: str,
                error: type[InvalidRequest]) -> None:
    said = f"{where}: group_order fifo allows one claimed job per group"
    if limit is not None and limit > 1:
        raise error(f"{said}; group_limit is {limit}")
    for key, value in limits.items():
        if value is None or value > 1:
            raise error(f"{said}; group_limits[{shown(key)}] is "
                        f"{'null (unlimited)' if value is None else value}")
