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
    kill ``restart_after_s``, pause ``hold_s``, compete ``for_s`` and ``stop_with``;
    redrive ``mode`` (all, ids), ``then`` (kill, pause) ``after_s`` later, with the
    kill's or pause's own; claim_kill ``when`` (before, after: the owner killed
    ``delay_s`` after a big claim went out, or once it was answered) and
    ``restart_after_s`` (all durations in seconds)."""

    at_s: float
    kind: str  # kill | pause | compete | redrive | claim_kill
    params: dict[str, Any] = field(default_factory=dict)


def make_schedule(args: argparse.Namespace) -> list[Event]:
    """The nemesis events, from ``--seed`` alone: kinds shuffled into equal slots of
    the chaos phase, each at a random point in the first part of its slot."""
    rng = random.Random(f"{args.seed}-nemesis")
    kinds = ["kill"] * args.kills + ["pause"] * args.pauses + ["compete"] * args.competitors
    kinds += ["redrive"] * args.redrives + ["claim_kill"] * args.claim_kills
    rng.shuffle(kinds)
    seen = {"redrive": 0, "claim_kill": 0}
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
        elif kind == "redrive":  # all and by id in turn, then a kill or a pause
            params = {"mode": ("all", "ids")[seen[kind] % 2],
                      "then": rng.choice(["kill", "pause"]),
                      "after_s": round(rng.uniform(0.0, 0.3), 3),
                      "restart_after_s": round(rng.uniform(args.restart_min_s,
                                                           args.restart_max_s), 3),
                      "hold_s": round(args.lease_s + rng.uniform(args.pause_extra_min_s,
                                                                 args.pause_extra_max_s), 3)}
            seen[kind] += 1
        elif kind == "claim_kill":  # the owner killed before a big claim's answer, then after
            params = {"when": ("before", "after")[seen[kind] % 2],
                      "delay_s": round(rng.uniform(0.005, 0.05), 3),
                      "restart_after_s": round(rng.uniform(args.restart_min_s,
                                                           args.restart_max_s), 3)}
            seen[kind] += 1
        else:
            params = {"for_s": round(min(30.0, max(3.0, slot * rng.uniform(0.3, 0.55))), 3),
                      "stop_with": rng.choice(["SIGTERM", "SIGKILL"])}
        events.append(Event(round(at, 3), kind, params))
    return events
