"""What :class:`~osqueue_spark.client.QueueClient` sends and reads: job bodies
and their staged lines, claimed jobs, and per-token results.

Options and payload numbers are refused, before anything is sent, as
:mod:`osqueue_spark.args` says (``InvalidArgument``, naming the field).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any, NamedTuple

from broker.errors import StaleToken
from broker.wire import ItemResult, encode_staged_line
from osqueue_spark.args import InvalidArgument, job_options, json_bytes

#: Most bytes of job lines one push request carries (a larger job goes alone):
#: well under the broker's default request limit (64 MiB, ``--max-request-mb``).
BATCH_BYTES = 8 * 1024 * 1024


# NamedTuples, not frozen dataclasses: a worker builds tens of thousands a
# second, and a frozen dataclass's __init__ costs several times more.
class ClaimedJob(NamedTuple):
    """A job this worker holds. ``token`` fences every later call about it;
    ``group``: the job's group, or None."""

    id: str
    payload: Any
    token: str
    attempt: int
    lease_expires_at: str
    group: str | None = None


def job_body(job: Any) -> dict[str, Any]:
    """A job as :meth:`QueueClient.push <osqueue_spark.client.QueueClient.push>` takes it
    (a payload, or a dict with ``payload`` and options) as its body; ``InvalidArgument``
    for an unknown field."""
    if isinstance(job, dict) and "payload" in job:
        unknown = set(job) - {"payload", "priority", "delay_s", "max_attempts", "key", "group"}
        if unknown:
            raise InvalidArgument(f"unknown job fields {sorted(unknown)[:5]}")
        return job
    return {"payload": job}


def job_staged_line(job: Any) -> bytes:
    """A job (as for :meth:`osqueue_spark.client.QueueClient.push`) as one staged line
    (:func:`broker.wire.encode_staged_line`)."""
    return body_line(job_body(job))


def body_line(body: dict[str, Any]) -> bytes:
    """:func:`job_staged_line` of a body :func:`job_body` already checked; options
    and payload numbers are refused as :mod:`osqueue_spark.args` says."""
    options = {k: v for k, v in body.items() if k != "payload" and v is not None}
    payload = json_bytes(body["payload"], "payload", json_default)
    return encode_staged_line(payload, job_options(options) if options else None)


def json_default(value: Any) -> Any:
    """Encode what Spark rows hold and JSON lacks: decimals as strings, bytes as text."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


# NamedTuples built from a tuple of all their fields (half the cost of calling them:
# workers make one per job).
# (a claimed job's "group" is there only when it has one: see claimed_job)
CLAIMED_FIELDS = operator.itemgetter("id", "payload", "token", "attempt", "lease_expires_at")


def claimed_job(out: dict[str, Any]) -> ClaimedJob:
    """A job of a claim's answer as a :class:`ClaimedJob`."""
    return tuple.__new__(ClaimedJob, (*CLAIMED_FIELDS(out), out.get("group")))


def items_of(out: dict[str, Any]) -> list[ItemResult]:
    new = tuple.__new__
    return [new(ItemResult, (r["token"], r["ok"], r.get("reason"), r.get("status")))
            for r in out["results"]]


def checked(results: list[ItemResult], raise_on_stale: bool) -> list[ItemResult]:
    """``results``; with ``raise_on_stale``, ``StaleToken`` if any token was refused
    (``details``: the refused ``tokens`` and their ``reasons``; the others acted)."""
    refused = [r for r in results if not r.ok] if raise_on_stale else []
    if refused:
        named = ", ".join(f"{r.token} ({r.reason})" for r in refused[:3])
        raise StaleToken(f"{len(refused)} of {len(results)} token(s) refused: {named}"
                         + (" ..." if len(refused) > 3 else ""),
                         tokens=[r.token for r in refused], reasons=[r.reason for r in refused])
    return results


def chunks(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def line_chunks(bodies: Iterable[dict[str, Any]], size: int, max_bytes: int
                ) -> Iterator[list[bytes]]:
    """Job bodies (:func:`job_body`) as the staged lines of push requests: each
    list at most ``size`` jobs and, but for a single larger job, ``max_bytes``
    bytes. A job is encoded (and refused: ``InvalidArgument``) as its request is
    made, and a full request is handed out before the next job is taken."""
    lines: list[bytes] = []
    total = 0
    for body in bodies:
        line = body_line(body)
        if lines and total + len(line) > max_bytes:
            yield lines
            lines, total = [], 0
        lines.append(line)
        total += len(line)
        if len(lines) >= size:
            yield lines
            lines, total = [], 0
    if lines:
        yield lines
