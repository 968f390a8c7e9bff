"""The immutable job objects of the queues in the store: segment objects (deep
queues' pending jobs) and spill objects (jobs a commit takes out of the head,
:func:`broker.paths.spill_key`): written once, read a window at a time
(segments), deleted once dropped, swept when nothing references them. The
segments' bytes and references are :mod:`broker.model.segments`' (pure); this
module makes the store calls, off the event loop (the broker's ``io``:
:func:`broker.commit.offloop.run_io`).

Used by pushes and publishes by reference (:mod:`broker.service.by_reference`),
by the queue's commit target before each batch
(:meth:`broker.service.queue_target.QueueTarget.prepare`:
:meth:`SegmentStore.check` and :meth:`SegmentStore.read_window`), and by the
periodic sweep, with the staging sweep (:meth:`broker.service.broker.Broker.sweep_staging`).

Lifecycle, crash-safe:

* :meth:`SegmentStore.write` (and :meth:`SegmentStore.write_spill`, called by a
  commit target's ``before_write`` hook, in the commit's own attempt) creates
  the object (``create_if_absent`` under a fresh random salt: never replacing
  one) BEFORE the commit that references it. A lost reply, a crash or a
  commit that never lands leaves at worst an object no head references, which
  the sweep removes.
* :meth:`SegmentStore.read_window` refuses (:class:`~broker.errors.SegmentMissing`,
  naming the object) a reference whose object is missing or has another etag:
  a job is never silently skipped.
* :meth:`SegmentStore.delete_dropped` deletes the objects of the references a
  commit dropped (exhausted or purged), called only after that commit landed;
  a failed delete is logged and left to the sweep.
* :meth:`SegmentStore.sweep` (listing both prefixes, ``segments/`` and
  ``spills/``) deletes an object only if (a) this broker has listed it for
  ``grace_s`` (its own monotonic clock, from the first sweep that listed it:
  wall clocks of writers do not matter), (b) the caller's in-memory
  references do not name it, and (c) the landed head, read from the store
  just before deleting, does not reference it either. The grace period covers
  the window between an object's write and the landing of the commit that
  references it: a commit never references a segment written more than
  ``grace_s`` before it lands (:mod:`broker.service.by_reference` refuses to
  commit references to objects it began writing more than half of it ago;
  a push or publish retried later writes its segments again, under new salts;
  a spill object is held from its write until its commit is answered). A
  reference once dropped never comes back, so deleting after (c) is safe
  against commits that land meanwhile.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from typing import Any, Protocol

import orjson

from broker import paths
from broker.errors import Conflict, CorruptState, NotFound, OsqueueError
from broker.model.format.segment_format import (
    Runs,
    check_object_version,
    check_version,
    encode_segment,
    read_checked,
    read_directory,
    read_header,
)
from broker.model.format.spill_format import SpilledJob, SpillSource
from broker.model.format.spill_format import read_checked as spill_read_checked
from broker.model.state import QueueState, SegmentRef, SpillRefLike
from broker.storage import Data, ObjectStore
from broker.storage.base import ListedKeys

log = logging.getLogger("osqueue.segments")

#: Runs a blocking storage call off the event loop: ``await io(fn, *args)``.
IO = Callable[..., Awaitable[Any]]
#: The keys of the objects the landed head references (None: unknown, delete nothing).
Landed = Callable[[], Awaitable[Collection[str] | None]]
#: The lists of a queue object that reference immutable job objects by ``"key"``.
REF_LISTS = ("segments", "spills")


class ObjectRef(Protocol):
    """A reference to an immutable job object: what deleting it needs."""

    @property
    def key(self) -> str: ...


class SegmentStore:
    """The immutable job objects (segments and spill objects) of one store, seen
    from one broker.

    ``io`` runs a blocking store call in the broker's I/O threads, ``bulk``
    likewise with the collector paused (parsing a head); ``grace_s`` is how
    long (s, on ``monotonic``) an unreferenced object is listed before the
    sweep deletes it; ``push_jobs`` how many jobs make a bulk push go by
    reference (:mod:`broker.service.by_reference`; 0: none does), and
    ``push_bytes`` how many bytes of payload do (0: not by size);
    ``grouped``: whether a bulk push whose jobs have groups goes by reference
    too, into grouped segments (format 3), or into the head.
    """

    def __init__(self, store: ObjectStore, io: IO, bulk: IO, *, grace_s: float,
                 monotonic: Callable[[], float], push_jobs: int = 0,
                 push_bytes: int = 0, grouped: bool = False) -> None:
        self.store = store
        self.push_jobs = push_jobs  # bulk pushes this large go by reference (0: none)
        self.push_bytes = push_bytes  # ... or this many bytes of payload (0: not by size)
        self.grouped = grouped  # ... grouped ones too (else they go into the head)
        self._io = io
        self._bulk = bulk
        self.grace_s = grace_s
        self._monotonic = monotonic
        self._seen: dict[str, dict[str, float]] = {}  # queue -> key -> first listed
        self._busy: dict[str, int] = {}  # key -> pushes still committing a ref to it
        self._listed = ListedKeys("job object", log)  # skips keys no store call takes

    # -- write ------------------------------------------------------------------------
    async def write(self, queue: str, first_seq: int, priority: int, run_at_ms: int,
                    payloads: Sequence[bytes], *, max_attempts: int,
                    created_ms: int | None = None,
                    groups: Runs | None = None) -> SegmentRef:
        """Write a new segment object of ``queue`` holding ``payloads`` (JSON
        bytes, checked already) as pending jobs with seqs from ``first_seq``,
        due at ``run_at_ms`` (ms); return its reference (``taken`` 0), to be
        committed in the head afterwards. ``groups``: the directory of a
        grouped segment (``payloads`` group-major; format 3, its ref counting
        the runs), None for format 2.

        ``ValueError`` (nothing written) for input :func:`encode_segment`
        refuses. The store's errors otherwise: after ``StorageUnavailable``
        the object may exist unreferenced (the sweep removes it); the caller
        writes again, which picks a new key.
        """
        ref: SegmentRef = await self._io(self._write, queue, first_seq, priority, run_at_ms,
                                         payloads, max_attempts, created_ms, groups)
        return ref

    def _write(self, queue: str, first_seq: int, priority: int, run_at_ms: int,
               payloads: Sequence[bytes], max_attempts: int,
               created_ms: int | None, groups: Runs | None = None) -> SegmentRef:
        data = encode_segment(queue, first_seq, priority, run_at_ms, payloads,
                              max_attempts=max_attempts, created_ms=created_ms, groups=groups)
        key = paths.segment_key(queue, paths.segment_name(first_seq, secrets.token_hex(4)))
        etag = self._create(key, data)
        return SegmentRef(key=key, etag=etag, first_seq=first_seq, count=len(payloads),
                          priority=priority, run_at_ms=run_at_ms,
                          groups=None if groups is None else len(groups))

    async def write_spill(self, queue: str, kind: str, commit_seq: int,
                          data: Data) -> tuple[str, str]:
        """Write ``data`` (a spill object's bytes, as the model computed them) as a
        new spill object of ``queue`` of ``kind`` (``"pending"`` or ``"dead"``),
        to be referenced first by version ``commit_seq`` of the head; return its
        ``(key, etag)``. The key is held from the sweep (:meth:`hold`) before the
        write starts: the caller :meth:`release` s it once its commit is answered.

        ``ValueError`` (nothing written, nothing held) for a kind or seq
        :func:`broker.paths.spill_name` refuses. The store's errors otherwise
        (the key then released): after ``StorageUnavailable`` the object may
        exist unreferenced (the sweep removes it after the grace); the caller
        writes again, which picks a new key.
        """
        key = paths.spill_key(queue, paths.spill_name(kind, commit_seq, secrets.token_hex(4)))
        self.hold([key])
        try:
            etag: str = await self._io(self._create, key, data)
        except BaseException:  # (it may exist: unreferenced, swept after the grace)
            self.release([key])
            raise
        return key, etag

    def _create(self, key: str, data: Data) -> str:
        """Create ``key`` holding ``data`` (never replacing an object); its etag."""
        try:
            return self.store.create_if_absent(key, data)
        except Conflict:
            # The store client's own retry of a create that landed sees 412: if
            # the object holds these bytes, it is ours (a salt never repeats).
            got = self.store.read(key)
            if got.data != (data if isinstance(data, bytes) else b"".join(data)):
                raise
            return got.etag

    # -- read -------------------------------------------------------------------------
    async def read_window(self, ref: SegmentRef, start: int | None = None,
                          stop: int | None = None) -> list[bytes]:
        """The job lines (each with its leading ``,\\n``, as
        :func:`broker.model.format.segment_format.segment_lines` gives them) at positions
        ``start`` to ``stop`` of ``ref``'s segment (default: its untaken jobs).

        Raises :class:`~broker.errors.SegmentMissing` naming the object if it
        is missing or its etag is not ``ref.etag``, ``CorruptState`` if its
        bytes disagree with the reference, ``ValueError`` for a window outside
        ``[0, ref.count]`` (nothing read), and the store's errors. Reads only.
        """
        lo = (ref.taken if ref.groups is None else 0) if start is None else start
        hi = ref.count if stop is None else stop
        if not 0 <= lo <= hi <= ref.count:
            raise ValueError(f"segment {ref.key}: window [{lo}, {hi}) is outside "
                             f"[0, {ref.count}]")
        lines: list[bytes] = await self._io(self._read_window, ref, lo, hi)
        return lines

    async def read_grouped(self, ref: SegmentRef) -> tuple[list[bytes], Runs]:
        """The whole of grouped segment ``ref``'s job lines (as :meth:`read_window`
        gives them) and its directory, from one read; refused as :meth:`read_window`
        refuses (a directory that disagrees with ``ref.groups``: ``CorruptState``
        naming the key)."""
        got: tuple[list[bytes], Runs] = await self._io(self._read_grouped, ref)
        return got

    def _read_grouped(self, ref: SegmentRef) -> tuple[list[bytes], Runs]:
        try:
            got = self.store.read(ref.key)
        except NotFound:
            read_checked(ref, None, None, self.store.url)  # (refuses: SegmentMissing)
            raise
        lines = read_checked(ref, got.data, got.etag, self.store.url, 0, ref.count)
        runs = read_header(got.data, ref.key).groups
        if runs is None:  # (read_checked compared ref.groups with the header's)
            raise CorruptState(f"{self.store.url}: segment {ref.key} has no directory")
        return lines, runs

    async def read_directory(self, ref: SegmentRef) -> Runs:
        """Grouped segment ``ref``'s directory only (its lines are not kept:
        what a claim needs of every due grouped segment, while only the
        segments a batch reaches are held whole). ``SegmentMissing`` naming the
        object if it is missing or not at ``ref.etag``, ``CorruptState`` naming
        the key for a header that disagrees with the reference, and the
        store's errors. Reads only."""
        got: Runs = await self._io(self._read_directory, ref)
        return got

    def _read_directory(self, ref: SegmentRef) -> Runs:
        try:
            got = self.store.read(ref.key)
        except NotFound:
            check_version(ref, None, self.store.url)  # (refuses: SegmentMissing)
            raise
        check_version(ref, got.etag, self.store.url)
        # (the whole object is read and dropped: stores here have no ranged read;
        # the header line is all that stays)
        try:
            return read_directory(got.data, ref.key, ref)
        except ValueError as exc:
            raise CorruptState(f"{self.store.url}: {exc}") from None

    def _read_window(self, ref: SegmentRef, start: int, stop: int) -> list[bytes]:
        try:
            got = self.store.read(ref.key)
        except NotFound:
            return read_checked(ref, None, None, self.store.url, start, stop)
        return read_checked(ref, got.data, got.etag, self.store.url, start, stop)

    def hold(self, keys: Iterable[str]) -> None:
        """Keep the sweep off ``keys`` (written by a push, or a commit's
        ``before_write``, whose commit is not answered yet) until :meth:`release`."""
        for key in keys:
            self._busy[key] = self._busy.get(key, 0) + 1

    def release(self, keys: Iterable[str]) -> None:
        """The push (or commit) holding ``keys`` is answered: the sweep may judge them again,
        after a whole grace period from now (a write of unknown outcome may
        land that late: the commit loop's timeout is well inside it)."""
        now = self._monotonic()
        for key in keys:
            left = self._busy.get(key, 0) - 1
            if left > 0:
                self._busy[key] = left
                continue
            self._busy.pop(key, None)
            queue = paths.job_object_queue(key)
            if queue is not None and key in self._seen.get(queue, {}):
                self._seen[queue][key] = now

    async def read_spill(self, ref: SpillSource) -> list[SpilledJob]:
        """Every job of spill object ``ref`` (taken-out positions included: the
        caller skips them), read through the one check
        (:func:`~broker.model.format.spill_format.read_checked`):
        ``SegmentMissing`` naming the object if it is missing or not at
        ``ref.etag``, ``CorruptState`` naming it if its bytes disagree with
        ``ref``, and the store's errors. Reads only."""
        jobs: list[SpilledJob] = await self._io(self._read_spill, ref)
        return jobs

    def _read_spill(self, ref: SpillSource) -> list[SpilledJob]:
        try:
            got = self.store.read(ref.key)
        except NotFound:
            return spill_read_checked(ref, None, None, self.store.url, 0, ref.count)
        return spill_read_checked(ref, got.data, got.etag, self.store.url, 0, ref.count)

    async def check(self, ref: SegmentRef) -> None:
        """Raise :class:`~broker.errors.SegmentMissing` naming the object unless
        ``ref``'s segment exists at ``ref.etag`` (a metadata lookup where the
        store has one: what a takeover asks of every reference it loads)."""
        await self._io(self._check, ref)

    async def check_spill(self, ref: SpillRefLike) -> None:
        """Raise :class:`~broker.errors.SegmentMissing` naming the spill object
        unless ``ref``'s object exists at ``ref.etag`` (as :meth:`check`)."""
        await self._io(self._check_spill, ref)

    def _check_spill(self, ref: SpillRefLike) -> None:
        try:
            etag = self.store.head(ref.key)
        except NotFound:
            etag = None
        parsed = paths.parse_spill_key(ref.key)
        check_object_version("spill object", parsed[0] if parsed else "?", ref.key, ref.etag,
                             etag, self.store.url)

    def _check(self, ref: SegmentRef) -> None:
        try:
            etag = self.store.head(ref.key)
        except NotFound:
            etag = None
        check_version(ref, etag, self.store.url)

    # -- delete -----------------------------------------------------------------------
    async def delete_dropped(self, refs: Iterable[ObjectRef]) -> int:
        """Delete the objects of ``refs`` (segments or spill objects), which a
        commit that has LANDED dropped (exhausted or purged); return how many
        were deleted. A failed delete is
        logged and left to the sweep; never raises a storage error."""
        keys = [ref.key for ref in refs]
        if not keys:
            return 0
        failed: list[tuple[str, str]] = await self._io(self._delete_each, keys)
        for key, why in failed:
            log.warning("job object %s dropped but not deleted yet (%s); the sweep "
                        "removes it", key, why)
        return len(keys) - len(failed)

    def _delete_each(self, keys: list[str]) -> list[tuple[str, str]]:
        failed = []
        for key in keys:
            try:
                self.store.delete(key)
            except (OsqueueError, OSError) as exc:
                failed.append((key, str(exc)))
        return failed

    # -- sweep ------------------------------------------------------------------------
    async def sweep(self, queue: str, referenced: Collection[str], *,
                    landed: Landed | None = None, now: float | None = None) -> int:
        """Delete the segment and spill objects of ``queue`` that this broker has listed
        for at least ``grace_s`` (``now``: this broker's monotonic seconds,
        default its clock), that ``referenced`` (the keys the caller's head
        references) does not name, and that ``landed()`` (awaited only when
        there are such objects: the keys the landed head references, None if
        unknown) does not name either. Without ``landed`` nothing is deleted;
        the listing still starts the objects' grace periods. Returns how many
        were deleted. Listed keys the store refuses are skipped (logged once);
        a failed delete is logged and tried again by the next sweep. Raises
        the store's errors of the listings.
        """
        now = self._monotonic() if now is None else now
        listed = [key for prefix in (paths.segments_prefix(queue), paths.spills_prefix(queue))
                  for key in await self._io(self.store.list, prefix)]
        before = self._seen.get(queue, {})
        seen: dict[str, float] = {}
        for key in listed:
            if paths.job_object_queue(key) != queue or not self._listed.usable(key):
                continue
            seen[key] = before.get(key, now)
        self._seen[queue] = seen
        old = [key for key, first in seen.items() if now - first >= self.grace_s
               and key not in referenced and key not in self._busy]
        if not old or landed is None:
            return 0
        keep = await landed()
        if keep is None:
            return 0
        doomed = [key for key in old if key not in keep]
        if not doomed:
            return 0
        failed = await self._io(self._delete_each, doomed)
        for key, why in failed:
            log.warning("unreferenced job object %s not deleted (%s); the next sweep "
                        "tries again", key, why)
        left = {key for key, _ in failed}  # (kept, with its first-listed time)
        for key in doomed:
            if key not in left:
                del seen[key]
        removed = len(doomed) - len(failed)
        log.info("swept %d segment or spill object(s) of %s that no commit references",
                 removed, queue)
        return removed

    async def landed_refs(self, queue: str) -> set[str] | None:
        """The keys of the objects ``queue``'s object in the store references
        (its ``"segments"`` and ``"spills"``, :data:`REF_LISTS`; none before
        format version 4, or without an object), or None if the object cannot
        be read as JSON (then nothing is swept). Reads the whole object: the
        sweep asks only when it has an unreferenced object past its grace
        period."""
        try:
            got = await self._io(self.store.read, paths.state_key(queue))
        except NotFound:
            return set()
        return await self._bulk(functools.partial(_referenced_keys, where=queue), got.data)

    async def sweep_served(self, queues: Iterable[tuple[str, QueueState | None]]) -> int:
        """:meth:`sweep` each of ``queues`` (name, the state its loop holds, None
        while it re-reads), confirming against the landed head
        (:meth:`landed_refs`); a queue whose sweep fails is logged and the
        others are swept. Returns how many objects were deleted."""
        removed = 0
        for name, state in list(queues):
            referenced = {ref.key for ref in state.segment_refs} \
                | {ref.key for ref in state.spill_refs} if state is not None else set()
            try:
                removed += await self.sweep(
                    name, referenced, landed=functools.partial(self.landed_refs, name))
            except OsqueueError as exc:
                log.warning("job object sweep of %s failed (%s); tried again later", name, exc)
        return removed


def _referenced_keys(data: bytes, *, where: str) -> set[str] | None:
    """The ``"key"`` of every entry of a queue object's ``"segments"`` and
    ``"spills"`` lists (each may be absent), read leniently (a key kept by
    mistake is only swept later), or None if ``data`` is not a JSON object or
    one of those is not a list."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        raw = None
    if not isinstance(raw, dict):
        log.warning("job object sweep of %s: its queue object is not a JSON object; "
                    "nothing swept", where)
        return None
    keys: set[str] = set()
    for name in REF_LISTS:
        refs = raw.get(name, [])
        if not isinstance(refs, list):
            log.warning("job object sweep of %s: its queue object's %s are not a list; "
                        "nothing swept", where, name)
            return None
        keys.update(ref["key"] for ref in refs
                    if isinstance(ref, dict) and isinstance(ref.get("key"), str))
    return keys
