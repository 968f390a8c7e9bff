"""New jobs into a queue state: each checked, the keyed ones deduplicated
against the idempotency window, the room the object has left checked; all or
nothing (an error is raised before anything was added).

Pure: time comes in as ``now_ms``; the operations that call these are in
:mod:`broker.model.transitions`.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from broker.errors import InvalidRequest, PayloadTooLarge, QueueFull, shown
from broker.limits import MAX_ATTEMPTS, MAX_DELAY_MS, MAX_KEY_CHARS, MAX_PRIORITY
from broker.model import idempotency
from broker.model.groups.names import check_group
from broker.model.job import JOB_OVERHEAD_BYTES, PENDING, Job, JobIds
from broker.model.lifecycle import add_pending, add_pending_bulk
from broker.model.ops import NewJob
from broker.model.state import QueueState
from broker.wire import compact


def validate_new(state: QueueState, new: NewJob) -> int:
    """Check one new job; return its size estimate. ``InvalidRequest`` or
    ``PayloadTooLarge`` if it breaks a limit, quoting a bad option by its first
    characters only (:func:`~broker.errors.shown`)."""
    limit = state.settings.max_payload_bytes
    if len(new.payload) > limit:
        raise PayloadTooLarge(
            f"payload is {len(new.payload)} bytes; this queue's limit is {limit} bytes"
        )
    if not -MAX_PRIORITY <= new.priority <= MAX_PRIORITY:
        raise InvalidRequest(f"priority must be within +-{MAX_PRIORITY}, "
                             f"got {shown(new.priority)}")
    if not 0 <= new.delay_ms <= MAX_DELAY_MS:
        raise InvalidRequest(f"delay must be within [0, {MAX_DELAY_MS}] ms, "
                             f"got {shown(new.delay_ms)} ms")  # (ms: no float to overflow)
    if new.max_attempts is not None and not 1 <= new.max_attempts <= MAX_ATTEMPTS:
        raise InvalidRequest(f"max_attempts must be 1..{MAX_ATTEMPTS}, "
                             f"got {shown(new.max_attempts)}")
    if new.key is not None and not 0 < len(new.key) <= MAX_KEY_CHARS:
        raise InvalidRequest(f"idempotency keys must be 1..{MAX_KEY_CHARS} characters")
    if new.group is not None:
        check_group(new.group, "group")
    return len(new.payload) + JOB_OVERHEAD_BYTES


_OPTIONS_BUT_GROUP = operator.itemgetter(1, 2, 3, 4)
_DEFAULT_BUT_GROUP = (0, 0, None, None)


def insert_jobs(state: QueueState, jobs: Sequence[NewJob], now_ms: int) -> Sequence[str]:
    """Validate all, then create all (or raise having created nothing)."""
    if jobs and set(map(_OPTIONS_BUT_GROUP, jobs)) == {_DEFAULT_BUT_GROUP}:
        groups = [new.group for new in jobs]
        return insert_payloads(state, [new[0] for new in jobs], now_ms,
                               None if groups.count(None) == len(groups) else groups)
    seen = idempotency.seen_keys(state, now_ms)
    fresh: dict[str, int] = {}
    incoming = 0
    for new in jobs:
        size = validate_new(state, new)
        if new.key is not None:
            if new.key in fresh or seen(new.key) is not None:
                continue
            fresh[new.key] = 0
        incoming += size
    check_room(state, incoming)
    ids: list[str] = []
    created: dict[str, str] = {}
    added: list[Job] = []
    counters, settings_max = state.counters, state.settings.max_attempts
    for new in jobs:
        if new.key is not None:
            entry = seen(new.key)
            if entry is not None:
                ids.append(entry.job_id)
                continue
            if new.key in created:
                ids.append(created[new.key])
                continue
        counters.enqueued += 1
        seq = counters.enqueued
        # (kept as a Job until claimed: a copy, not orjson's 4 KB buffer; see compact)
        job = Job(seq, compact(new.payload), PENDING, new.priority,
                  now_ms + new.delay_ms, 0, new.max_attempts or settings_max, now_ms, new.key)
        if new.group is not None:
            job.group = new.group
            state.grouped.append(seq)  # (ascending: seqs only grow)
        added.append(job)
        if new.key is not None:
            created[new.key] = job.id
            idempotency.remember_key(state, new.key, job.id, now_ms)
        ids.append(job.id)
    add_pending(state, added, now_ms)
    return ids


def check_room(state: QueueState, incoming: int) -> None:
    if incoming and state.size_estimate() + incoming > state.settings.max_state_bytes:
        raise QueueFull(
            f"queue full: the object would grow past {state.settings.max_state_bytes} bytes; "
            "nothing from this push was written"
        )


#: Group names that passed check_group (a rule of the string alone): a grouped
#: push checks each name it has not met lately, not each name of every push
#: (``bench/groups_cpu_bench.py``).
_valid_groups: set[str | None] = set()


def insert_payloads(state: QueueState, payloads: Sequence[bytes], now_ms: int,
                    groups: Sequence[str | None] | None = None) -> JobIds:
    """:func:`insert_jobs` for jobs with default options (the bulk path), each
    with its group from ``groups`` (None: none has one)."""
    if not payloads:
        return JobIds(0, 0)
    limit = state.settings.max_payload_bytes
    sizes = list(map(len, payloads))
    if max(sizes) > limit:
        raise PayloadTooLarge(f"payload is {max(sizes)} bytes; this queue's limit is {limit} bytes")
    if groups is not None:
        fresh = set(groups).difference(_valid_groups)
        fresh.discard(None)
        for group in fresh:
            check_group(group, "group")
        if len(_valid_groups) + len(fresh) > 4096:  # (a few pushes' groups are what repeats)
            _valid_groups.clear()
        _valid_groups.update(fresh)
    check_room(state, sum(sizes) + JOB_OVERHEAD_BYTES * len(payloads))
    return add_pending_bulk(state, payloads, now_ms, groups)
