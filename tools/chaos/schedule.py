"""The nemesis schedule: which faults happen when in the chaos phase, drawn from
``--seed`` alone (the same seed and options give the same schedule)."""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Event:
    """One nemesis action: ``at_s`` seconds into the chaos phase; ``params`` by kind:
    kill ``restart_after_s``, pause ``hold_s``, compete ``for_s`` and ``stop_with``
    (all durations in seconds)."""

    at_s: float
    kind: str  # kill | pause | compete
    params: dict[str, Any] = field(default_factory=dict)


def make_schedule(args: argparse.Namespace) -> list[Event]:
    """The nemesis events, from ``--seed`` alone: kinds shuffled into equal slots of
    the chaos phase, each at a random point in the first part of its slot."""
    rng = random.Random(f"{args.seed}-nemesis")
    kinds = ["kill"] * args.kills + ["pause"] * args.pauses + ["compete"] * args.competitors
    rng.shuffle(kinds)
    slot = args.seconds / max(1, len(kinds))
    events = []
    for n, kind in enumerate(kinds):
        at = n * slot + slot * rng.uniform(0.1, 0.35)
        params: dict[str, Any]
        if kind == "kill":
            params = {"restart_after_s": round(rng.uniform(args.restart_min_s,
                                                           args.restart_max_s), 3)}
        elif kind == "pause":
            params = {"hold_s": round(args.lease_s + rng.uniform(args.pause_extra_min_s,
                                                                 args.pause_extra_max_s), 3)}
        else:
            params = {"for_s": round(min(30.0, max(3.0, slot * rng.uniform(0.3, 0.55))), 3),
                      "stop_with": rng.choice(["SIGTERM", "SIGKILL"])}
        events.append(Event(round(at, 3), kind, params))
    return events
