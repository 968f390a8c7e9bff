"""The takeover policy (broker/service/ownership.py) alone: no store, no event loop."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from broker.limits import BROKER_LEASE_S
from broker.model.state import BrokerRecord
from broker.service.ownership import (
    RENEW_AFTER,
    Ownership,
    new_broker_id,
    renew_at_ms,
    renew_due,
)
from tests.support.faults import Clock

LEASE_MS = round(BROKER_LEASE_S * 1000)


def record(broker_id: str = "b-other-1-x", expires_ms: int = 100_000,
           lease_ms: int = LEASE_MS) -> BrokerRecord:
    return BrokerRecord(broker_id, "http://other", expires_ms, lease_ms)


def test_renewal_falls_due_once_the_renew_fraction_of_the_lease_passed() -> None:
    rec = record(expires_ms=1_000_000)
    at = renew_at_ms(rec, LEASE_MS)
    assert at == 1_000_000 - round(LEASE_MS * (1 - RENEW_AFTER))
    assert renew_due(rec, LEASE_MS, at)
    assert not renew_due(rec, LEASE_MS, at - 1)
    # granted at expiry - lease, so the timer is RENEW_AFTER of the lease later
    assert at - (rec.expires_ms - LEASE_MS) == round(LEASE_MS * RENEW_AFTER)


def test_may_take_an_empty_record_or_its_own() -> None:
    own = Ownership("b-me", "http://me", monotonic=Clock().monotonic)
    assert own.may_take("q", None)
    assert own.may_take("q", record("b-me"))


def test_may_take_only_after_a_whole_quiet_lease_on_its_own_clock() -> None:
    clock = Clock()
    own = Ownership("b-me", "http://me", monotonic=clock.monotonic)
    rec = record()
    assert not own.may_take("q", rec)  # first seen now
    own.observe("q", etag="e1")
    clock.advance(BROKER_LEASE_S - 1)
    assert not own.may_take("q", rec)
    own.observe("q", etag="e2")  # the owner wrote: the lease starts over
    clock.advance(BROKER_LEASE_S - 1)
    assert not own.may_take("q", rec)
    clock.advance(1)
    assert own.may_take("q", rec)


def test_a_record_change_is_a_sign_of_life() -> None:
    clock = Clock()
    own = Ownership("b-me", "http://me", monotonic=clock.monotonic)
    own.observe("q", etag="e1", record=record(expires_ms=1))
    clock.advance(BROKER_LEASE_S)
    assert own.observe("q", etag="e2", record=record(expires_ms=2))
    assert not own.may_take("q", record(expires_ms=2))


def test_a_standby_reads_the_object_only_once_it_was_quiet_for_its_owners_lease() -> None:
    clock = Clock()
    own = Ownership("b-me", "http://me", monotonic=clock.monotonic)
    own.observe("q", etag="e1")
    assert own.worth_reading("q")  # the owner's lease is not known yet
    own.observe("q", etag="e1", record=record(lease_ms=10_000))
    assert own.lease_s("q") == 10.0 and not own.worth_reading("q")
    clock.advance(9.9)
    assert not own.worth_reading("q")
    clock.advance(0.1)
    assert own.worth_reading("q")
    own.forget("q")  # a queue served meanwhile: its lease is still known after
    assert own.lease_s("q") == 10.0


def test_a_local_broker_process_that_is_gone_may_be_taken_over_at_once() -> None:
    code = "from broker.service.ownership import new_broker_id; print(new_broker_id())"
    child = subprocess.run([sys.executable, "-c", code],
                           capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": os.getcwd()})
    gone_id = child.stdout.strip()
    own = Ownership("b-me", "http://me", monotonic=Clock().monotonic)
    assert own.owner_gone(record(gone_id))
    assert own.may_take("q", record(gone_id))
    alive = record(new_broker_id())  # this very process: alive
    assert not own.owner_gone(alive)


@pytest.mark.parametrize("foreign", ["b-elsewhere-1-abcdef123456", "not-an-id"])
def test_a_broker_of_another_machine_is_never_judged_gone(foreign: str) -> None:
    own = Ownership("b-me", "http://me", monotonic=Clock().monotonic)
    assert not own.owner_gone(record(foreign))
