"""A hypothesis state machine of claim records (:class:`ClaimMachine`) against a
simple reference model of claims (each claim: its first fence, its jobs in
order, one expiry, settled positions, marks), over
:func:`broker.model.transitions.apply`: run by
tests/unit/broker/model/test_claim_records_machine.py, and extended with
segment sources by test_claim_records_machine_segments.py."""


from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.model import transitions as T
from broker.model.claim_records import runs_of_bits
from broker.model.format import codec
from broker.model.indexes import lease_fence, lease_time
from broker.model.job import CANCELLED, CLAIMED, COMPLETED, DEAD, PENDING
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    Fail,
    FailItem,
    Heartbeat,
    PushPayloads,
    Reclaim,
    Release,
    TakeOver,
)
from broker.model.tokens import stored_part
from tests.support.states import new_queue, read_back

T0 = 1_767_225_600_000


@dataclass
class ModelClaim:
    """The reference model of one claim."""

    fence: int
    seqs: list[int]
    expires: int
    lease: int
    tokens: list[str]
    settled: set[int] = field(default_factory=set)
    marked: set[int] = field(default_factory=set)

    def live(self, pos: int, now: int) -> bool:
        return pos not in self.settled and self.expires > now


class ClaimMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = new_queue(T0)
        self.state.settings.max_attempts = 3
        self.now = T0
        self.fence = 0
        self.claims: dict[int, ModelClaim] = {}
        self.status: dict[int, str] = {}  # seq -> status, as the model has it
        self.settled_as: dict[str, str] = {}  # token -> how it settled (completed, failed...)
        self.brokers = 0

    # -- helpers ------------------------------------------------------------------------

    def _where(self, token: str) -> tuple[ModelClaim, int] | None:
        fence = int(stored_part(token).rpartition(".")[2])
        for claim in self.claims.values():
            if claim.fence <= fence < claim.fence + len(claim.seqs):
                return claim, fence - claim.fence
        return None

    def _all_tokens(self) -> list[str]:
        return [t for c in self.claims.values() for t in c.tokens]

    def _settle(self, claim: ModelClaim, pos: int, status: str, how: str) -> None:
        claim.settled.add(pos)
        claim.marked.discard(pos)
        self.status[claim.seqs[pos]] = status
        self.settled_as[claim.tokens[pos]] = how

    # -- rules --------------------------------------------------------------------------

    @rule(n=st.integers(1, 6))
    def push(self, n: int) -> None:
        first = self.state.counters.enqueued + 1
        T.apply(self.state, PushPayloads(tuple(b"%d" % i for i in range(n))), self.now)
        for seq in range(first, first + n):
            self.status[seq] = PENDING

    @rule(n=st.integers(1, 5), lease=st.sampled_from([1_000, 5_000, 60_000]))
    def claim(self, n: int, lease: int) -> None:
        jobs = T.apply(self.state, Claim("w", n, lease), self.now).jobs
        if not jobs:
            return
        seqs = [int(j.id[1:]) for j in jobs]
        assert all(self.status[s] == PENDING for s in seqs)
        fences = [int(stored_part(j.token).rpartition(".")[2]) for j in jobs]
        assert fences == list(range(self.fence + 1, self.fence + 1 + len(jobs)))
        claim = ModelClaim(fences[0], seqs, self.now + lease, lease, [j.token for j in jobs])
        self.claims[claim.fence] = claim
        self.fence = fences[-1]
        for seq in seqs:
            self.status[seq] = CLAIMED

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), lease=st.sampled_from([2_000, 30_000]))
    def heartbeat(self, data: st.DataObject, lease: int) -> None:
        tokens = data.draw(st.lists(st.sampled_from(self._all_tokens()), min_size=1, max_size=4))
        answers = T.apply(self.state, Heartbeat(tuple(tokens), lease), self.now).items
        renewed: set[int] = set()
        for token, answer in zip(tokens, answers, strict=True):
            claim, pos = self._where(token)  # type: ignore[misc]
            if not claim.live(pos, self.now):
                assert not answer.ok, (token, answer)
            elif pos in claim.marked:
                assert (answer.ok, answer.status) == (False, CANCELLED), answer
                self._settle(claim, pos, CANCELLED, CANCELLED)
            else:
                assert answer.ok, (token, answer)
                if claim.fence not in renewed:
                    renewed.add(claim.fence)
                    claim.expires, claim.lease = self.now + lease, lease

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        tokens = data.draw(st.lists(st.sampled_from(self._all_tokens()), min_size=1, max_size=4))
        answers = T.apply(self.state, Complete(tuple(CompleteItem(t) for t in tokens)),
                          self.now).items
        for token, answer in zip(tokens, answers, strict=True):
            claim, pos = self._where(token)  # type: ignore[misc]
            first = self.settled_as.get(token)
            if first == COMPLETED:  # a repeat: answered as the first call was
                assert (answer.ok, answer.status) == (True, COMPLETED), answer
            elif first == CANCELLED:
                assert (answer.ok, answer.status) == (False, CANCELLED), answer
            elif not claim.live(pos, self.now):
                assert not answer.ok, answer
            elif pos in claim.marked:
                assert (answer.ok, answer.status) == (False, CANCELLED), answer
                self._settle(claim, pos, CANCELLED, CANCELLED)
            else:
                assert (answer.ok, answer.status) == (True, COMPLETED), answer
                self._settle(claim, pos, COMPLETED, COMPLETED)

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        tokens = data.draw(st.lists(st.sampled_from(self._all_tokens()), min_size=1, max_size=3))
        answers = T.apply(self.state, Fail(tuple(FailItem(t, "boom", 0) for t in tokens)),
                          self.now).items
        for token, answer in zip(tokens, answers, strict=True):
            claim, pos = self._where(token)  # type: ignore[misc]
            first = self.settled_as.get(token)
            if first in (PENDING, DEAD):  # a repeat: answered as the first call was
                assert (answer.ok, answer.status) == (True, first), answer
            elif first is not None or not claim.live(pos, self.now):
                assert not answer.ok, answer
            elif pos in claim.marked:
                assert (answer.ok, answer.status) == (False, CANCELLED), answer
                self._settle(claim, pos, CANCELLED, CANCELLED)
            else:
                assert answer.ok and answer.status in (PENDING, DEAD), answer
                self._settle(claim, pos, answer.status or "", answer.status or "")

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        tokens = data.draw(st.lists(st.sampled_from(self._all_tokens()), min_size=1, max_size=3,
                                    unique=True))
        result = T.apply(self.state, Release(tuple(tokens)), self.now)
        expected = []
        for token in tokens:
            claim, pos = self._where(token)  # type: ignore[misc]
            if not claim.live(pos, self.now):
                continue
            if pos in claim.marked:
                self._settle(claim, pos, CANCELLED, CANCELLED)
            else:
                expected.append(f"j{claim.seqs[pos]:010d}")
                self._settle(claim, pos, PENDING, "released")
        assert list(result.ids) == expected

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        seqs = [s for s, status in self.status.items() if status == CLAIMED]
        if not seqs:
            return
        seq = data.draw(st.sampled_from(seqs))
        T.apply(self.state, Cancel((f"j{seq:010d}",)), self.now)
        for claim in self.claims.values():
            for pos, s in enumerate(claim.seqs):
                if s == seq and pos not in claim.settled:
                    claim.marked.add(pos)

    @rule(ms=st.integers(1, 70_000))
    def tick_and_reclaim(self, ms: int) -> None:
        self.now += ms
        T.apply(self.state, Reclaim(), self.now)
        for claim in self.claims.values():
            if claim.expires <= self.now:
                for pos in range(len(claim.seqs)):
                    if pos in claim.settled:
                        continue
                    if pos in claim.marked:
                        self._settle(claim, pos, CANCELLED, CANCELLED)
                    else:
                        job = self.state.jobs.get(claim.seqs[pos])
                        assert job is not None and job.status in (PENDING, DEAD)
                        self._settle(claim, pos, job.status, "reclaimed")

    @rule(skew=st.integers(-120_000, 120_000))
    def takeover_on_a_skewed_clock(self, skew: int) -> None:
        """A new broker reads the object back and takes it over on its own clock:
        every live claim gets a fresh lease of its own length from that clock."""
        codec.stamp(self.state, "b", self.now, f"c-{self.state.seq}")
        self.state = read_back(codec.encode(self.state))
        self.now = max(T0, self.now + skew)
        self.brokers += 1  # (a broker that takes over from another renews the leases)
        T.apply(self.state, TakeOver(f"b-{self.brokers}", "http://b", 30_000), self.now)
        for claim in self.claims.values():
            if len(claim.settled) < len(claim.seqs):
                claim.expires = self.now + claim.lease

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def records_are_the_models_claims(self) -> None:
        held = {f: c for f, c in self.claims.items() if len(c.settled) < len(c.seqs)}
        records = self.state.claim_records
        assert list(records) == sorted(held)
        for fence, record in records.items():
            claim = held[fence]
            assert record.seqs == claim.seqs
            assert record.expires_ms == claim.expires and record.lease_ms == claim.lease
            assert set(runs_expand(runs_of_bits(record.settled, record.n))) == claim.settled
            assert set(record.cancel) == claim.marked
            for pos in record.unsettled():
                job = self.state.jobs[claim.seqs[pos]]
                assert job.status == CLAIMED and job.claim == fence
                assert job.lease_token == stored_part(claim.tokens[pos])
                assert job.lease_expires_ms == claim.expires
                assert (job.cancel_ms is not None) == (pos in claim.marked)

    @invariant()
    def the_lease_heap_has_each_held_claims_expiry_and_only_claimed_jobs_read_a_record(
            self) -> None:
        entries = {(lease_time(k), lease_fence(k)) for k in self.state.leases}
        for fence, record in self.state.claim_records.items():
            assert (record.expires_ms, fence) in entries
        for job in self.state.jobs.touched():
            record = self.state.claim_records.get(job.claim or 0)
            assert job.rec is (record if job.status == CLAIMED else None), job

    @invariant()
    def statuses_are_the_models(self) -> None:
        for seq, want in self.status.items():
            job = self.state.jobs.get(seq)
            if job is None:
                continue  # (none is dropped here: no archive step)
            assert job.status == want, (seq, job.status, want)
        assert self.state.counters.fence == self.fence

    @invariant()
    def the_object_reads_back_to_the_same_records_and_bytes(self) -> None:
        codec.stamp(self.state, "b", self.now, f"c-{self.state.seq}")  # (each step a commit)
        data = codec.encode(self.state)
        back = read_back(data)
        assert [r.encode() for r in back.claim_records.values()] == \
            [r.encode() for r in self.state.claim_records.values()]
        assert codec.encode(back) == data


def runs_expand(runs: list[int]) -> list[int]:
    return [p for i in range(0, len(runs), 2) for p in range(runs[i], runs[i] + runs[i + 1])]
