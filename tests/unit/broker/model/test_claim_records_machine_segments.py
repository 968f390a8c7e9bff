"""Claim records with segment sources (``held_in_records``): the claim-records
state machine (:mod:`tests.unit.broker.model.test_claim_records_machine`) with
segments pushed beside inline jobs, so claims mix ``seq`` and ``seg`` parts.
Jobs held at a segment part have no line in the head; every settlement
(complete, fail, release, cancel end, reclaim) answers as for an inline job;
a takeover starts with an empty held-jobs cache, filled as the broker's
``prepare`` fills it (:func:`broker.model.segments.claims.held_loads`, read from
the segment's lines). After every step the object decodes to the same bytes,
each job is in exactly one place, and a segment ref stays while a record
names it. No I/O."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.indexes import lease_fence, lease_time
from broker.model.job import CLAIMED, PENDING
from broker.model.ops import DropArchived, Reclaim
from broker.model.segments.claims import held_loads
from broker.model.state import HeldJobs, QueueState, SegmentRef, SegmentWindows
from broker.model.tokens import stored_part
from broker.paths import segment_key, segment_name
from tests.support.claim_machine import ClaimMachine

FAR = 1 << 50  # (a reclaim planned this far ahead loads every record's held lines)


class SegmentClaimMachine(ClaimMachine):
    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[str, list[bytes]] = {}  # segment key -> its job lines
        self._wire(self.state)

    def _wire(self, state: QueueState) -> None:
        state.windows = getattr(self, "windows", None) or SegmentWindows()
        self.windows = state.windows
        state.held_in_records = True

    @rule(n=st.integers(1, 8))
    def push_segment(self, n: int) -> None:
        state = self.state
        first = state.counters.enqueued + 1
        payloads = [b'{"s":%d}' % (first + i) for i in range(n)]
        data = encode_segment("q", first, 0, self.now, payloads, max_attempts=3)
        ref = SegmentRef(segment_key("q", segment_name(first, "0123abcd")), f'"e{first}"',
                         first, n, 0, self.now)
        state.counters.enqueued += n
        state.segment_refs.append(ref)
        lines = segment_lines(data, ref)
        self.lines[ref.key] = lines
        self.windows.put(ref, 0, lines)
        for seq in range(first, first + n):
            self.status[seq] = PENDING

    @rule(skew=st.integers(-120_000, 120_000))
    def takeover_on_a_skewed_clock(self, skew: int) -> None:
        super().takeover_on_a_skewed_clock(skew)
        state = self.state
        self._wire(state)
        # a new broker: nothing held in memory; its prepare reads the held lines
        state.held = HeldJobs()
        for ref, fence, span in held_loads(state, [Reclaim()], FAR):
            lo = span[3]
            state.held.put(fence, span, ref, self.lines[ref.key][lo:lo + span[1]])

    @rule()
    def archive_lands(self) -> None:
        """Every commit's archive object landed: its completions leave the head
        (inline lines and records' done entries alike)."""
        seqs = tuple(sorted({*self.state.completed, *self.state.done_commits}))
        T.apply(self.state, DropArchived(seqs), self.now)
        assert not self.state.done_commits
        assert all(not r.completions for r in self.state.claim_records.values())

    @invariant()
    def records_are_the_models_claims(self) -> None:
        held = {f: c for f, c in self.claims.items() if len(c.settled) < len(c.seqs)}
        records = self.state.claim_records
        # (a record whose every position settled stays while a done entry awaits archive)
        assert list(records) == sorted({*held, *(
            f for f, r in records.items() if r.done and r.completions)})
        for fence, record in records.items():
            if fence not in held:
                continue
            claim = held[fence]
            assert record.seqs == claim.seqs
            assert record.expires_ms == claim.expires and record.lease_ms == claim.lease
            assert set(record.cancel) == claim.marked
            for pos in record.unsettled():
                job = self.state.jobs.get(claim.seqs[pos])
                if record.seg_span(pos) is not None:
                    assert job is None  # (no line: its record holds it)
                    continue
                assert job is not None and job.status == CLAIMED and job.claim == fence
                assert job.lease_token == stored_part(claim.tokens[pos])

    @invariant()
    def the_lease_heap_has_each_held_claims_expiry_and_only_claimed_jobs_read_a_record(
            self) -> None:
        """(The base machine's, for the records with a position still held: one whose
        every position settled stays only for its done entries, and holds no lease.)"""
        entries = {(lease_time(k), lease_fence(k)) for k in self.state.leases}
        for fence, record in self.state.claim_records.items():
            assert record.done or (record.expires_ms, fence) in entries
        for job in self.state.jobs.touched():
            record = self.state.claim_records.get(job.claim or 0)
            assert job.rec is (record if job.status == CLAIMED else None), job

    @invariant()
    def a_named_segment_stays_and_an_exhausted_unnamed_one_goes(self) -> None:
        named = {s[2] for r in self.state.claim_records.values() for s in r.segs or ()}
        keys = {ref.key for ref in self.state.segment_refs}
        assert named <= keys
        for ref in self.state.segment_refs:
            assert not ref.exhausted or ref.key in named
        assert self.state.seg_names == {
            k: sum(1 for r in self.state.claim_records.values()
                   if any(s[2] == k for s in r.segs or ())) for k in named}

    @invariant()
    def claimed_counts_are_the_models(self) -> None:
        want = sum(1 for status in self.status.values() if status == CLAIMED)
        assert self.state.count_by_status()[CLAIMED] == want


SegmentClaimMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestSegmentClaimMachine = SegmentClaimMachine.TestCase
