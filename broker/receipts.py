"""Receipts: what recent commits answered, kept in the queue object so that a
retried call gets the answer its first attempt got, on this broker or another.

A call whose answer was lost (a dropped connection, a timeout, an "outcome
unknown" error) is repeated by the client. For the repeat to be harmless the
queue object remembers, for a while, what each commit did for calls that are
not idempotent by themselves:

* a push sent with a request key (``QueueClient`` gives every push one): the
  ids it answered, so the repeat answers the same ids and creates nothing;
* a claim sent with a request key: the fences of the leases it granted, so
  the repeat hands back the same jobs instead of stranding them;
* every settled token (completed, failed and retrying, failed and dead), so a
  repeated complete or fail answers as the first one did, never "stale".

Each commit that did any of these adds one receipt, one line of the object::

    {"seq": 42, "at": "2026-11-22T03:43:47.123Z",
     "push": [["k-3f9a", 1001, 100]], "claim": [["k-77c1", 5120, 16]],
     "completed": [5001, 3, 5100, 1], "failed": [4990, 1], "dead": []}

``push`` entries are the request key followed by runs of job seqs (first,
count, first, count, ...), ``claim`` entries the key, the first fence and how
many; ``completed``, ``failed`` and ``dead`` are runs of fences. A fence
number names one lease (the broker numbers every lease it grants), so it
stands for the token ``<job id>.<fence>``.

Receipts older than the queue's ``retry_ttl_s`` are dropped; so are the
oldest request receipts beyond ``retry_keys`` keys, and the oldest settled
tokens beyond ``retry_keys`` runs (the two are bounded apart, so a stream of
completions never evicts a push's receipt). A retry that comes later than
that is answered as if it were new (a push creates its jobs again, a
complete says "stale"). The bounds keep the object small: every commit
writes the window whole.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from broker import timefmt

#: Outcomes of a settled token, as the receipts name them.
COMPLETED = "completed"
FAILED = "failed"  # failed, will be retried (the job is pending again)
DEAD = "dead"
OUTCOMES = (COMPLETED, FAILED, DEAD)

#: Rough bytes one remembered item costs in the object (for the size limit).
ITEM_BYTES = 24
RECEIPT_BYTES = 60


def runs_of(values: Iterable[int]) -> list[int]:
    """``[5, 6, 7, 9]`` -> ``[5, 3, 9, 1]``: runs of consecutive ints, in order."""
    out: list[int] = []
    for v in values:
        if out and out[-2] + out[-1] == v:
            out[-1] += 1
        else:
            out += (v, 1)
    return out


def expand(runs: Sequence[int]) -> Iterator[int]:
    """The ints a list of runs stands for, in order."""
    for i in range(0, len(runs), 2):
        yield from range(runs[i], runs[i] + runs[i + 1])


def fence_of(token: str) -> int | None:
    """The fence number of a token (``<job id>.<fence>``), or None if malformed."""
    _, dot, tail = token.rpartition(".")
    if not dot or not tail.isascii() or not tail.isdigit() or len(tail) > 18:
        return None
    return int(tail)


@dataclass(slots=True)
class Receipt:
    """What one commit (``seq``, at ``at_ms``) answered; see the module docstring."""

    seq: int
    at_ms: int
    push: list[tuple[str, list[int]]] = field(default_factory=list)
    claim: list[tuple[str, int, int]] = field(default_factory=list)
    settled: dict[str, list[int]] = field(default_factory=dict)  # outcome -> runs
    enc: bytes | None = None

    def empty(self) -> bool:
        return not self.push and not self.claim and not self.settled

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "at": timefmt.fmt(self.at_ms)}
        if self.push:
            out["push"] = [[key, *runs] for key, runs in self.push]
        if self.claim:
            out["claim"] = [list(entry) for entry in self.claim]
        for outcome in OUTCOMES:
            runs = self.settled.get(outcome)
            if runs:
                out[outcome] = runs
        return out

    def encode(self) -> bytes:
        """The receipt's line, preceded by the ``,\\n`` separator (cached: a
        receipt never changes once its commit is written)."""
        if self.enc is None:
            self.enc = b",\n" + orjson.dumps(self.to_dict())
        return self.enc


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _runs(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or len(value) % 2:
        raise ValueError(f"{what} must be a list of (first, count) pairs")
    return [_int(v, what) for v in value]


class Receipts:
    """The window of receipts with lookup indexes, oldest first.

    Request receipts (push and claim keys) and settled tokens are bounded
    separately, each by ``max_items``: a queue completing thousands of jobs a
    second must not push a retried push's receipt out within seconds. Settled
    tokens count by runs (what they cost in the object), not one by one.
    """

    __slots__ = ("_fence_index", "_open", "_with_requests", "_with_settled", "claims",
                 "entries", "pushes", "request_items", "settled_runs")

    def __init__(self) -> None:
        self.entries: deque[Receipt] = deque()
        self.pushes: dict[str, list[int]] = {}  # request key -> runs of seqs
        self.claims: dict[str, tuple[int, int]] = {}  # request key -> (first fence, count)
        self.request_items = 0
        self.settled_runs = 0
        self._with_requests: deque[Receipt] = deque()  # receipts holding push/claim entries
        self._with_settled: deque[Receipt] = deque()  # receipts holding settled runs
        self._fence_index: list[tuple[int, int, str]] | None = None  # (first, end, outcome)
        self._open: Receipt | None = None

    @property
    def items(self) -> int:
        """Remembered items: request keys plus runs of settled tokens."""
        return self.request_items + self.settled_runs

    # -- recording (by transitions, during a commit being built) -----------------
    def _receipt(self, seq: int, now_ms: int) -> Receipt:
        """The receipt of the commit being built (``seq``), created on first use."""
        r = self._open
        if r is None or r.seq != seq:
            r = self._open = Receipt(seq, now_ms)
            self.entries.append(r)
        return r

    def _requests_of(self, r: Receipt) -> None:
        if not r.push and not r.claim:
            self._with_requests.append(r)

    def record_push(self, key: str, runs: list[int], seq: int, now_ms: int) -> None:
        """Remember that the push ``key`` (commit ``seq``) answered the job seqs
        ``runs`` (see :func:`runs_of`)."""
        r = self._receipt(seq, now_ms)
        self._requests_of(r)
        r.push.append((key, runs))
        self.pushes[key] = runs
        self.request_items += 1

    def record_claim(self, key: str, first_fence: int, count: int, seq: int,
                     now_ms: int) -> None:
        r = self._receipt(seq, now_ms)
        self._requests_of(r)
        r.claim.append((key, first_fence, count))
        self.claims[key] = (first_fence, count)
        self.request_items += 1

    def record_settled(self, outcome: str, fences: Sequence[int], seq: int,
                       now_ms: int) -> None:
        if not fences:
            return
        r = self._receipt(seq, now_ms)
        if not r.settled:
            self._with_settled.append(r)
        runs = runs_of(fences)
        r.settled.setdefault(outcome, []).extend(runs)
        self.settled_runs += len(runs) // 2
        self._fence_index = None

    def close(self) -> None:
        """The commit being built is written: later records start a new receipt."""
        self._open = None

    # -- lookups ------------------------------------------------------------------
    def push_ids(self, key: str) -> list[int] | None:
        runs = self.pushes.get(key)
        return None if runs is None else list(expand(runs))

    def claim_fences(self, key: str) -> tuple[int, int] | None:
        return self.claims.get(key)

    def outcome(self, fence: int) -> str | None:
        """How the token numbered ``fence`` was settled, if it is remembered."""
        index = self._fence_index
        if index is None:
            index = self._fence_index = sorted(
                (runs[i], runs[i] + runs[i + 1], outcome)
                for r in self.entries for outcome, runs in r.settled.items()
                for i in range(0, len(runs), 2))
        at = bisect.bisect_right(index, (fence, 1 << 62, "")) - 1
        if at >= 0 and index[at][0] <= fence < index[at][1]:
            return index[at][2]
        return None

    # -- bounds ---------------------------------------------------------------------
    def trim(self, now_ms: int, ttl_ms: int, max_items: int) -> None:
        """Drop what is older than ``ttl_ms``; then the oldest request receipts
        beyond ``max_items`` and the oldest settled runs beyond ``max_items``
        (the open receipt is never trimmed)."""
        oldest_ok = now_ms - ttl_ms
        entries = self.entries
        while entries and entries[0] is not self._open and entries[0].at_ms < oldest_ok:
            r = entries.popleft()
            self._drop_requests(r)
            self._drop_settled(r)
        with_requests = self._with_requests
        while self.request_items > max_items and with_requests \
                and with_requests[0] is not self._open:
            self._drop_requests(with_requests[0])
        with_settled = self._with_settled
        while self.settled_runs > max_items and with_settled \
                and with_settled[0] is not self._open:
            self._drop_settled(with_settled[0])
        while entries and entries[0] is not self._open and entries[0].empty():
            entries.popleft()

    def _drop_requests(self, r: Receipt) -> None:
        if not r.push and not r.claim:
            return
        for key, _ in r.push:
            self.pushes.pop(key, None)
        for key, _, _ in r.claim:
            self.claims.pop(key, None)
        self.request_items -= len(r.push) + len(r.claim)
        r.push, r.claim, r.enc = [], [], None
        if self._with_requests and self._with_requests[0] is r:
            self._with_requests.popleft()
        else:
            self._with_requests.remove(r)

    def _drop_settled(self, r: Receipt) -> None:
        if not r.settled:
            return
        self.settled_runs -= sum(len(runs) // 2 for runs in r.settled.values())
        r.settled, r.enc = {}, None
        self._fence_index = None
        if self._with_settled and self._with_settled[0] is r:
            self._with_settled.popleft()
        else:
            self._with_settled.remove(r)

    def rebase(self, now_ms: int) -> None:
        """Re-time every receipt to ``now_ms`` (after a takeover: their times were
        written on another broker's clock)."""
        for r in self.entries:
            r.at_ms, r.enc = now_ms, None

    def size_estimate(self) -> int:
        return self.items * ITEM_BYTES + len(self.entries) * RECEIPT_BYTES

    def max_fence(self) -> int:
        top = 0
        for r in self.entries:
            for _, first, count in r.claim:
                top = max(top, first + count - 1)
            for runs in r.settled.values():
                for i in range(0, len(runs), 2):
                    top = max(top, runs[i] + runs[i + 1] - 1)
        return top

    def max_seq(self) -> int:
        return max((max(expand(runs), default=0) for r in self.entries for _, runs in r.push),
                   default=0)

    # -- the object ---------------------------------------------------------------
    def encode(self) -> list[bytes]:
        """The receipts' lines, each with its leading separator (cut the first's)."""
        return [r.encode() for r in self.entries if not r.empty()]

    def to_list(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.entries if not r.empty()]

    @classmethod
    def decode(cls, raw: Any) -> Receipts:
        """Receipts from the object's ``receipts`` list; raises ``ValueError``
        naming what is malformed."""
        out = cls()
        if raw is None:
            return out
        if not isinstance(raw, list):
            raise ValueError("receipts must be a list")
        last_seq = -1
        for item in raw:
            if not isinstance(item, dict):
                raise ValueError("each receipt must be an object")
            seq = _int(item.get("seq"), "receipt seq")
            if seq <= last_seq:
                raise ValueError("receipts must be in commit order")
            last_seq = seq
            at = item.get("at")
            if not isinstance(at, str):
                raise ValueError(f"receipt {seq} has no time")
            r = Receipt(seq, timefmt.parse(at))
            for entry in item.get("push") or []:
                if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
                    raise ValueError(f"receipt {seq} has a malformed push entry")
                r.push.append((entry[0], _runs(entry[1:], f"receipt {seq} push ids")))
            for entry in item.get("claim") or []:
                if not isinstance(entry, list) or len(entry) != 3 or not isinstance(
                        entry[0], str):
                    raise ValueError(f"receipt {seq} has a malformed claim entry")
                r.claim.append((entry[0], _int(entry[1], "fence"), _int(entry[2], "count")))
            for outcome in OUTCOMES:
                if item.get(outcome):
                    r.settled[outcome] = _runs(item[outcome], f"receipt {seq} {outcome}")
            unknown = set(item) - {"seq", "at", "push", "claim", *OUTCOMES}
            if unknown:
                raise ValueError(f"receipt {seq} has unknown fields {sorted(unknown)}")
            out.entries.append(r)
            if r.push or r.claim:
                out._with_requests.append(r)
            if r.settled:
                out._with_settled.append(r)
            for key, runs in r.push:
                out.pushes[key] = runs
            for key, first, count in r.claim:
                out.claims[key] = (first, count)
            out.request_items += len(r.push) + len(r.claim)
            out.settled_runs += sum(len(runs) // 2 for runs in r.settled.values())
        return out
