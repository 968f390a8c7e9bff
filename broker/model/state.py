"""The queue's in-memory model: jobs, leases, settings, counters, job ids.

This module holds the queue's data and nothing else. :mod:`broker.model.format.codec`
turns a state into the object's bytes and back (byte templates, the per-job
cached encoding, blocks of 1,024 seqs), :mod:`broker.model.indexes` keeps the derived heaps, and
:mod:`broker.model.lifecycle` is the one place where a job changes status, keeping
the model, the heaps and the encoding in step. :mod:`broker.model.transitions` holds
the rules; it moves jobs only through :mod:`broker.model.lifecycle` and knows
nothing of the bytes or the heaps' layout.

On storage the state is one JSON object (``jq``-readable, one job a line)::

    {"format": "osqueue", "version": 5, "seq": 42, "writer": "b-1a2b",
     "commit": "c-5d0e...", "lineage": ["c-91aa...", ..., "c-5d0e..."],
     "updated_at": "2026-11-22T03:43:47.123Z",
     "broker": {"id": "b-1a2b", "url": "http://10.0.0.4:8765", "lease_s": 30.0,
                "lease_expires_at": "..."} | null,
     "paused": false, "settings": {...}, "counters": {...}, "token_key": "9c1f...",
     "segments": [
       {"key": "q/segments/seg-0000001001-5d0e91aa.jsonl", "etag": "\"3f9a...\"",
        "first_seq": 1001, "count": 65536, "priority": 0,
        "run_at": "2026-11-22T03:43:47.123Z", "taken": 2000},
       ...],
     "claims": [
       {"fence": 5001, "n": 2, "worker": "w-1", "lease_s": 60.0, "expires_at": "...",
        "heartbeat_at": "...", "parts": [{"seq": [1201, 2]}]},
       ...],
     "spills": [],
     "jobs": [
       {"id": "j0000000001", "seq": 1, "status": "pending", "priority": 0, ...},
       ...],
     "keys": [["idempotency-key", "j0000000001", "2026-11-22T03:43:47.123Z"], ...],
     "once": [["write:w-5d0e...", "2026-11-22T03:43:47.123Z"], ...],
     "receipts": {"requests": [["r-3f9a0c2b1d4e-17", "...", "push", 1001, 100,
                                "9f2c41d07a6be385"], ...],
                  "settled": [["...", {"completed": [5001, 120]}], ...]}}

A **segment** is an immutable JSON-lines object of pending jobs that share a
priority and a due time, with consecutive seqs (see :mod:`broker.model.segments`).
It is written before the commit that references it and never rewritten; the
head keeps one :class:`SegmentRef` per segment, one a line under
``"segments"`` (in ascending ``first_seq``, seq ranges disjoint). ``taken``
is the cursor: the jobs before it have moved into ``"jobs"`` (claimed, and
on from there); the rest are pending in the segment, and no job of the head
has their seqs. ``"segments"`` is always written (``[]`` for none), so a reader
can rely on it. A version-3 object (no ``"segments"``) loads with none and is
written as version 5 by its next write.

A **claim record** (``"claims"``, see :mod:`broker.model.claim_records`) holds
the one lease of a claim: worker, length, expiry, last heartbeat, and the
claim's jobs in claim order; a claimed job's line says ``"claim": <fence>``
(its record) instead of carrying a lease, and job ``i`` of the claim holds
lease number ``fence + i``. A heartbeat renews the record, so the whole
claim. A version-4 object's claimed lines (each with its lease) load as
records (consecutive lease numbers with the same lease merged into one) and
are written as version 5 by its next write. ``"spills"`` lists the head's
references to spill objects (:mod:`broker.model.format.spill_refs`: failed
and dead jobs a commit took out of the head; none while the broker's
``spill_jobs`` is 0); a broker from before them refuses a head that names one.

``token_key`` is the secret that binds the queue's lease tokens to it (see
:mod:`broker.model.tokens`); an object written before it existed has none
until its next write. ``"untagged_fences": N`` (written only while N > 0) is
the lease counter when that key was made: leases numbered up to N were
granted untagged and are taken untagged until they end.

``seq`` grows by one on every write, so no two writes carry the same bytes
(S3 etags are content hashes; an A-B-A write must not pass a CAS). ``commit``
is the identity of the write attempt that made this version, and
``lineage`` the identities of the last :data:`LINEAGE` versions, newest last:
a broker that does not know whether its write landed re-reads the object and
finds its attempt there, or under a later write, or learns for sure that it
did not land (see :mod:`broker.commit.loop`).

A job's status is pending, claimed, dead, completed or cancelled. A completed
job stays in the object, with its result, until its archive object is written
(after the commit that completed it) and a later commit drops it (see
:mod:`broker.model.format.archive`); so does a cancelled one (both keep their
lease spelled out on their line, as version 4 wrote it). A claimed job whose
cancel was asked for is marked in its record's ``"cancel"`` until it ends
cancelled (see :mod:`broker.model.cancels`). ``receipts`` are what recent
commits answered, for retried calls (see :mod:`broker.model.receipts`).

Fields added within version 4, written only when in use so that an object
not using them keeps its bytes: the settings ``max_claims_per_s`` and
``claim_burst`` (a broker from before them ignores them: no limit), and the
counter ``cancelled`` with the jobs' cancel fields (a broker from before them
refuses the object, an unknown counter, rather than serve it without them),
and a push receipt's digest of its jobs, last on its line (a broker from
before digests refuses the object, "must be a non-negative integer", rather
than answer a push of other jobs from it; see :mod:`broker.model.receipts`).

Payloads and results are kept as the bytes they arrived as: a job's line is
re-read verbatim (big integers, number spellings and escapes survive a
restart); only an object edited by hand into another layout falls back to
re-encoding the parsed values.

A bulk push's jobs (default options, the Spark write's) are kept as their
encoded line until something first touches them (see :mod:`broker.model.jobtable`):
``QueueState.jobs`` reads as seq -> :class:`Job` all the same.

Encoding is incremental: each job keeps its encoded bytes until it changes,
so a commit after changing 1k of 100k jobs re-encodes only those 1k plus a
join (see :mod:`broker.model.format.codec` and ``bench/state_encode_bench.py``).

The derived indexes (ready heap, delayed heap, lease heap) are rebuilt on
load (:mod:`broker.model.indexes`) and kept by :mod:`broker.model.lifecycle`; they are
never stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from broker.limits import check_setting
from broker.model.claim_records import ClaimRecord
from broker.model.job import CLAIMED, COMPLETED, DEAD, PENDING, Job, seq_of
from broker.model.jobtable import JobTable
from broker.model.ratelimit import ClaimGate
from broker.model.receipts import Receipts
from broker.model.segment_state import MAX_WINDOWS as MAX_WINDOWS  # (re-exported)
from broker.model.segment_state import HeldJobs as HeldJobs
from broker.model.segment_state import HeldRuns as HeldRuns
from broker.model.segment_state import SegmentRef as SegmentRef
from broker.model.segment_state import SegmentWindows as SegmentWindows
from broker.model.segment_state import Span as Span
from broker.model.tokens import Tagger

FORMAT = "osqueue"
# 3: completed jobs, commit identities, receipts, publish keys apart, lease_s;
# 4: "segments", the references to segment objects (so a commit's cost does not grow
#    with the pending jobs);
# 5: "claims", one record a claim holding its lease (claimed lines say "claim": fence),
#    and "spills", the references to spill objects (a broker from before them refuses
#    a head with one: no version of its own);
# 6: job groups ("group" on a job's line), written only while a job in the head has
#    one (broker.model.format.codec.version_of): a queue without groups stays at 5.
VERSION = 6
#: The version of a head that uses no groups (what a broker before groups reads).
UNGROUPED_VERSION = 5

#: Rough bytes one segment reference costs in the head (its line), whatever
#: the number of jobs its segment holds.
SEGMENT_REF_BYTES = 200
#: Rough bytes one ``taken_at`` run adds to a grouped ref's line in the head (at
#: most ``65535,65536,`` = 12 characters).
TAKEN_RUN_BYTES = 14
#: Rough bytes a grouped ref's line has beyond an ungrouped one's, runs aside
#: (``,"groups":65536,"taken_at":[]``: 29 characters).
GROUPED_REF_BYTES = 32

#: Rough bytes one claim record costs in the head (its line), whatever the
#: number of jobs its claim holds.
CLAIM_RECORD_BYTES = 250

#: Commit identities kept in the object (``lineage``), newest last.
LINEAGE = 32


@dataclass(slots=True)
class QueueSettings:
    """Per-queue settings, stored in the queue object.

    Units are in the names; :data:`broker.limits.SETTING_LIMITS` gives each one's
    range.
    ``max_state_bytes`` bounds the whole object: pushes beyond it are
    refused with ``queue_full``. ``dedup_*`` bound the window of idempotency
    keys (and of Spark's publish keys); ``retry_*`` bound the receipts that
    make retried calls safe (see :mod:`broker.model.receipts`).
    """

    max_attempts: int = 3
    backoff_base_s: float = 1.0
    backoff_max_s: float = 300.0
    dedup_keys: int = 200_000
    dedup_ttl_s: float = 86_400.0
    max_payload_bytes: int = 256 * 1024
    max_state_bytes: int = 512 * 1024 * 1024
    staged_ttl_s: float = 3_600.0  # staging objects of a vanished Spark writer expire
    retry_ttl_s: float = 600.0
    retry_keys: int = 100_000
    # The dispatch rate limit (see broker.model.ratelimit): jobs claimed per second
    # (0: no limit) and the bucket's size (0: one second's worth). Written only
    # when set (OPTIONAL_SETTINGS), so an object without a limit keeps its bytes.
    max_claims_per_s: float = 0.0
    claim_burst: int = 0
    # The group settings not at their default, as stored ("group_limit"...): checked
    # by broker.model.groups.settings (configure, and the claim that first uses them),
    # which this module may not import (the layers); empty for a queue without them.
    groups: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueueSettings:
        """Settings from a dict; unknown names are ignored (an older broker's
        object), bad values raise ``ValueError``. Names beginning ``group_`` are
        kept as they are, in ``groups``."""
        known = {f.name for f in fields(cls)} - {"groups"}
        checked: dict[str, Any] = {k: check_setting(k, v) for k, v in data.items() if k in known}
        groups = {k: v for k, v in data.items() if k.startswith("group_") and v is not None}
        return cls(**checked, groups=groups)

    def stored(self) -> dict[str, Any]:
        """The settings as the object holds them: every one, but those of
        :data:`OPTIONAL_SETTINGS` only when not at their default."""
        # (not dataclasses.asdict: a fifth of a small commit's encode, for plain values)
        out = {name: getattr(self, name) for name in self.__slots__}
        for name, default in OPTIONAL_SETTINGS.items():
            if out[name] == default:
                del out[name]
        out.update(out.pop("groups"))
        return out

    def shown(self) -> dict[str, Any]:
        """Every setting by name, as stats show them (the group settings only
        when set)."""
        out = {name: getattr(self, name) for name in self.__slots__}
        out.update(out.pop("groups"))
        return out


#: Settings written only when not at their default (added after version 4's
#: first objects: a queue that does not use them keeps its bytes; a broker
#: from before them ignores them, see ``QueueSettings.from_dict``).
OPTIONAL_SETTINGS: dict[str, Any] = {"max_claims_per_s": 0.0, "claim_burst": 0}


@dataclass(slots=True)
class KeyEntry:
    job_id: str
    at_ms: int
    enc: bytes | None = None


@dataclass(slots=True)
class BrokerRecord:
    """The queue's broker: who, where, and its lease. ``lease_ms`` is how long
    the broker may go without writing before others may take the queue over
    (judged on their own clocks, see :mod:`broker.service.ownership`); ``expires_ms``
    is that deadline on the owner's clock, for people reading the object."""

    id: str
    url: str
    expires_ms: int
    lease_ms: int


@dataclass(slots=True)
class Counters:
    enqueued: int = 0
    fence: int = 0
    completed: int = 0
    failed: int = 0
    dead: int = 0
    reclaimed: int = 0
    # Cancels that took: pending jobs cancelled, claimed jobs marked. Written only
    # once non-zero (stored()): a broker from before cancel refuses such an object
    # (an unknown counter) instead of serving it without its marks.
    cancelled: int = 0
    # Seqs a Reserve handed out (counted in ``enqueued``, the seq counter) whose
    # segments were not attached (yet, or ever: a push that went inline, an
    # attach never made); ``enqueued - reserved`` jobs were enqueued.
    reserved: int = 0

    def stored(self) -> dict[str, int]:
        """The counters as the object holds them (``cancelled`` and ``reserved``
        only when non-zero)."""
        out = {name: getattr(self, name) for name in self.__slots__}
        for name in ("cancelled", "reserved"):
            if not out[name]:
                del out[name]
        return out


#: Rough bytes of one spill reference in the object (one line of ``"spills"``).
SPILL_REF_BYTES = 240


class SpillRefLike(Protocol):
    """What the state asks of a reference to a spill object (the one kind is
    :class:`broker.model.format.spill_refs.SpillRef`, a layer above): its key,
    etag, kind (``"pending"`` or ``"dead"``) and how many jobs it still holds."""

    @property
    def key(self) -> str: ...

    @property
    def etag(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def live(self) -> int: ...


@dataclass(slots=True)
class QueueState:
    """The whole queue. Mutated only by :func:`broker.model.transitions.apply` (through
    :mod:`broker.model.lifecycle`) and :func:`broker.model.format.codec.stamp`."""

    seq: int = 0
    writer: str | None = None
    commit: str | None = None  # identity of the write attempt that made this version
    lineage: list[str] = field(default_factory=list)  # the last LINEAGE commits, newest last
    updated_ms: int = 0
    broker: BrokerRecord | None = None
    paused: bool = False
    settings: QueueSettings = field(default_factory=QueueSettings)
    counters: Counters = field(default_factory=Counters)
    jobs: JobTable = field(default_factory=JobTable)  # by seq, see broker.model.jobtable
    keys: dict[str, KeyEntry] = field(default_factory=dict)
    once: dict[str, KeyEntry] = field(default_factory=dict)  # publish keys (Spark writes)
    receipts: Receipts = field(default_factory=Receipts)
    # The head's references to segment objects ("segments" in the object), in
    # ascending first_seq.
    segment_refs: list[SegmentRef] = field(default_factory=list)
    # The head's references to spill objects ("spills"), in the object's order.
    spill_refs: list[SpillRefLike] = field(default_factory=list)
    # The claim records ("claims" in the object; broker.model.claim_records), by base
    # fence, in ascending fence: the leases of the claimed jobs. Kept by
    # broker.model.lifecycle, with each claimed job's copy of its record's lease.
    claim_records: dict[int, ClaimRecord] = field(default_factory=dict)
    # Never stored: refs dropped by changes since this state was loaded or last
    # committed, whose objects go once that commit lands (broker.model.segments.claims),
    # and the segment lines the broker loaded for claims (one per queue, shared).
    dropped_refs: list[SegmentRef | SpillRefLike] = field(default_factory=list, compare=False,
                                                          repr=False)
    windows: SegmentWindows | None = field(default=None, compare=False, repr=False)
    # Never stored: the jobs of spill objects the broker read for this batch (a
    # redrive or a purge copies or counts them; broker.model.spills), by (key, etag):
    # lists of broker.model.format.spill_format.SpilledJob, shared like windows.
    spill_windows: dict[tuple[str, str], list[Any]] = field(default_factory=dict,
                                                            compare=False, repr=False)
    # Never stored: the lines of jobs held at records' segment parts (shared like
    # windows), whether claims take segment jobs so (BrokerConfig.held_in_records;
    # the jobs of pending spill objects too), and how many records name each segment
    # or spill object, by key (a named ref stays; derived on load).
    held: HeldJobs = field(default_factory=HeldJobs, compare=False, repr=False)
    held_in_records: bool = field(default=False, compare=False, repr=False)
    seg_names: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    # Derived: commit seq -> fences of the records with a completion ("done") of it.
    done_commits: dict[int, list[int]] = field(default_factory=dict, compare=False, repr=False)
    # The secret of the queue's lease tokens (hex; "" until made) and what tags and
    # checks them with it (see broker.model.tokens); neither is ever shown.
    token_key: str = field(default="", repr=False)
    tagger: Tagger | None = field(default=None, compare=False, repr=False)
    # Leases numbered up to this were granted before the key and may come back
    # untagged (0: none; see broker.model.tokens.checker).
    untagged_fences: int = 0
    # Derived, never stored, kept by broker.model.lifecycle: heaps of ready_key
    # (pending and runnable), timed_key(run_at) (pending, later) and
    # lease_key(lease expiry, fence) (one a claim record). Entries go stale instead
    # of being removed; readers check them against the job (or record).
    ready: list[int] = field(default_factory=list)
    delayed: list[int] = field(default_factory=list)
    leases: list[int] = field(default_factory=list)
    # Derived, never stored: the dispatch rate limit's bucket and the claim rate
    # (broker.model.ratelimit), this broker's, carried across re-reads of the object.
    claims: ClaimGate = field(default_factory=ClaimGate, compare=False, repr=False)
    # Derived, never stored: a heap of the seqs of the head's grouped jobs, some maybe
    # gone from it since (dropped lazily by broker.model.format.codec.version_of).
    grouped: list[int] = field(default_factory=list, compare=False, repr=False)
    # Derived, never stored: the claims' per-group structures while the queue uses
    # groups (a broker.model.groups.counts.GroupState: held counts from the claim
    # records, the groups' ready jobs, fair dispatch), None otherwise and until a
    # claim builds it (broker.model.segments.grouped).
    groups: Any = field(default=None, compare=False, repr=False)
    # Derived, never stored: the per-group token buckets (and the group names their
    # gids stand for) of a ``groups`` given up by a rebuild on this broker (a settings
    # change, a stepped-back clock), for the next ``groups`` to keep: a rebuild hands
    # out no fresh burst (broker.model.segments.grouped.dissolve). A takeover loads a
    # new state: its buckets start full.
    group_buckets: Any = field(default=None, compare=False, repr=False)
    approx_bytes: int = 0  # jobs only; see size_estimate()
    key_bytes: int = 0  # the idempotency-key and publish-key windows
    # Completed jobs awaiting their archive object: commit seq -> job seqs.
    completed: dict[int, list[int]] = field(default_factory=dict)
    # Encoding cache by block (jobs whose seq >> BLOCK_SHIFT is equal: runs of
    # the object's own lines): each block's job seqs in order (removed ones are
    # filtered out lazily), the joined bytes of each clean block, and the blocks
    # to rebuild. Touched only by broker.model.format.codec and broker.model.lifecycle
    # (which keeps the caches in step with every status change; tests/ may
    # look, never write).
    block_jobs: dict[int, list[int]] = field(default_factory=dict)
    blocks: dict[int, bytes] = field(default_factory=dict)
    dirty_blocks: set[int] = field(default_factory=set)
    shrunk_blocks: set[int] = field(default_factory=set)  # dirty blocks that lost jobs
    # The lines of jobs completed since the last stamp, as they were while
    # claimed: the completed line is that line with its status and the
    # completion spliced in (broker.model.format.codec.stamp), not a fresh encode.
    claimed_lines: dict[int, bytes] = field(default_factory=dict, compare=False, repr=False)

    def job(self, job_id: str) -> Job | None:
        """The job with this id, or None."""
        seq = seq_of(job_id)
        return None if seq is None else self.jobs.get(seq)

    def count_by_status(self) -> dict[str, int]:
        """How many jobs have each status: the head's, the segments' pending
        ones (see ``broker.model.segments.refs.segment_counts``) and the spill
        objects' (pending or dead, from their references: O(references))."""
        counts = self.jobs.count_by_status()
        if self.segment_refs:
            counts[PENDING] += sum(ref.remaining for ref in self.segment_refs)
        held, done = self.held_by_status()
        counts[CLAIMED] += held
        counts[COMPLETED] += done
        for spill in self.spill_refs:
            counts[PENDING if spill.kind == PENDING else DEAD] += spill.live
        return counts

    def held_by_status(self) -> tuple[int, int]:
        """The jobs held at claim records' segment (or spill) parts, which have
        no line in the head: how many are claimed, and how many completed (done entries
        awaiting their archive object). O(records); (0, 0) without such parts."""
        held = done = 0
        for r in self.claim_records.values() if self.seg_names else ():
            held += r.held_seg()
            done += sum(len(e.pos) for e in r.completions or ())
        return held, done

    def held_marked(self) -> int:
        """How many jobs held at claim records' segment parts are marked for
        cancellation (the mark is their record's). O(records)."""
        return sum(1 for r in self.claim_records.values() if r.segs or r.spills
                   for pos in r.cancel if r.held_span(pos) is not None) if self.seg_names else 0

    def size_estimate(self) -> int:
        """Rough bytes of the object: jobs, key windows, receipts and segment
        references (:data:`SEGMENT_REF_BYTES` each: a segment's jobs are not in
        the object; a grouped one's ``taken_at`` runs :data:`TAKEN_RUN_BYTES`
        each besides)."""
        refs = self.segment_refs
        grouped = sum(GROUPED_REF_BYTES + TAKEN_RUN_BYTES * (len(ref.taken_at) // 2)
                      for ref in refs if ref.groups is not None) if refs else 0
        return self.approx_bytes + self.key_bytes + self.receipts.size_estimate() \
            + len(refs) * SEGMENT_REF_BYTES + grouped \
            + len(self.claim_records) * CLAIM_RECORD_BYTES \
            + len(self.spill_refs) * SPILL_REF_BYTES


def key_entry_bytes(key: str) -> int:
    """Rough bytes one idempotency-key entry costs in the object."""
    return len(key) + 48
