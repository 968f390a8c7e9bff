"""Claim records under random operation sequences: a hypothesis state machine
over :func:`broker.model.transitions.apply` against a simple reference model of
claims (each claim: its first fence, its jobs in order, one expiry, settled
positions, marks). Claim, heartbeat, complete, fail, release, cancel, reclaim,
a takeover on a skewed clock and repeats of every settling call; after every
step the head's records equal the model's, every claimed job's lease is its
record's (read through it; the lease heap has the record's expiry), and the
object decodes to the same records and bytes. No I/O."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from tests.support.claim_machine import ClaimMachine

ClaimMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestClaimMachine = ClaimMachine.TestCase
