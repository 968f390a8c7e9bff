"""Who may write a queue object: the takeover policy, in one place.

Every number of the policy is a named constant here, and every decision is a
function or method here; the broker (:mod:`broker.service.takeover`, which does the
watching, and :mod:`broker.service.queue_target`, which writes the records) asks and
never restates them.

A broker owns a queue while the object's ``broker`` record names it. Its
record carries a lease length (:data:`broker.limits.BROKER_LEASE_S` unless configured).

**Renewing.** The owner renews its record once :data:`RENEW_AFTER` of its
lease has passed on its own clock (:func:`renew_due`, :func:`renew_at_ms`),
so a live owner changes the object at least that often, even when idle.

**Watching.** A standby broker watches every queue it does not own with one
cheap ``head`` (the etag, no body) per queue every :data:`WATCH_INTERVAL_S`,
and lists the store for queues it does not know yet every :data:`RELIST_S`.
It reads an object whole only once it has been quiet for a whole lease of its
owner (:meth:`Ownership.worth_reading`).

**Retaking.** A broker may take a queue over (and so may the owner's own next
incarnation) when any of these holds (:meth:`Ownership.may_take`):

* the record is empty (the owner stopped cleanly and cleared it);
* it names this broker;
* it names a broker process on this machine (same host, boot and process
  namespace, which its id records) that is gone: a restarted broker, or a
  notebook's embedded one after a kernel restart, takes over at once;
* this broker has watched the object for a whole broker lease, timed on its
  own monotonic clock, and neither the object (its etag) nor its broker
  record changed.

There are no takeover requests: no broker asks another to hand a queue over,
and an owner never gives one up while it lives, except by stopping (which
clears its record). A broker that is sent a write for a queue it does not own
answers ``NotTheBroker`` with the owner's URL and leaves the queue alone.

No decision compares a time another machine wrote with this machine's clock:
the record's expiry is for people reading the object; only its lease
*length* is used. A paused owner that wakes up after being replaced finds
out at its next write (the CAS fails, the record names someone else) and
steps down.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from broker.model.state import BrokerRecord

#: The owner renews its record once this fraction of its lease has passed.
RENEW_AFTER = 1 / 3
#: How often standby brokers look at the objects of queues they do not own (s).
WATCH_INTERVAL_S = 1.0
#: How often a broker lists the store for queues it does not know yet (s).
RELIST_S = 10.0


def renew_due(record: BrokerRecord, lease_ms: int, now_ms: int) -> bool:
    """True if the owner should renew ``record`` (its own) at ``now_ms``: once
    :data:`RENEW_AFTER` of its lease of ``lease_ms`` has passed."""
    return record.expires_ms - now_ms <= lease_ms * (1 - RENEW_AFTER)


def renew_at_ms(record: BrokerRecord, lease_ms: int) -> int:
    """When (ms, the owner's clock) the owner should renew ``record``: the
    timer that keeps an idle owner writing (see :func:`renew_due`)."""
    return record.expires_ms - round(lease_ms * (1 - RENEW_AFTER))


def host_name() -> str:
    """This host's short name, as broker ids carry it."""
    return socket.gethostname().split(".")[0][:24] or "host"


def _machine_mark() -> str:
    """6 hex digits naming this boot of this machine and this process namespace:
    pids are comparable only between processes that share all three."""
    parts = [host_name().encode()]
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            parts.append(f.read())
    except OSError:
        parts.append(b"?")
    try:
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino).encode())
    except OSError:
        parts.append(b"?")
    return hashlib.sha1(b"|".join(parts)).hexdigest()[:6]


_MARK = _machine_mark()


def new_broker_id() -> str:
    """``b-{host}-{pid}-{mark}{random}``: unique, and says where the process runs
    (``mark``: see :func:`_machine_mark`)."""
    return f"b-{host_name()}-{os.getpid()}-{_MARK}{uuid.uuid4().hex[:6]}"


def _local_pid(broker_id: str) -> int | None:
    """The pid of a broker id made on this machine by :func:`new_broker_id`, else None."""
    head, _, tail = broker_id.rpartition("-")
    _, _, pid = head.rpartition("-")
    if not pid.isdigit() or not tail.startswith(_MARK) or len(tail) != 12:
        return None
    return int(pid)


def process_gone(pid: int) -> bool:
    """True if no live process has ``pid`` (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


@dataclass(slots=True)
class _Watch:
    etag: str | None
    record: tuple[str, int] | None  # (broker id, expiry) as last seen
    changed_at: float  # monotonic seconds


class Ownership:
    """The takeover policy of one broker, with what it has seen of each queue."""

    def __init__(self, broker_id: str, url: str, *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.broker_id = broker_id
        self.url = url
        self._monotonic = monotonic
        self._watches: dict[str, _Watch] = {}
        # queue -> the lease (s) its owner's record last gave; kept across forget()
        self._lease_s: dict[str, float] = {}

    def _watch(self, queue: str) -> _Watch:
        w = self._watches.get(queue)
        if w is None:
            w = self._watches[queue] = _Watch(None, None, self._monotonic())
        return w

    def observe(self, queue: str, *, etag: str | None = None,
                record: BrokerRecord | None = None) -> bool:
        """Note what the object looks like now; True if it changed since last seen.

        A record read with the etag of the version already watched is that
        version's record: learning it is no change.
        """
        w = self._watch(queue)
        if record is not None:
            self._lease_s[queue] = record.lease_ms / 1000
        changed = False
        same_version = etag is not None and etag == w.etag
        if etag is not None and etag != w.etag:
            changed = w.etag is not None
            w.etag = etag
        if record is not None:
            seen = (record.id, record.expires_ms)
            if seen != w.record:
                changed = changed or (w.record is not None and not same_version)
                w.record = seen
        if changed:
            w.changed_at = self._monotonic()
        return changed

    def forget(self, queue: str) -> None:
        """Start watching ``queue`` afresh (after owning it, or once it is gone)."""
        self._watches.pop(queue, None)

    def is_self(self, record: BrokerRecord | None) -> bool:
        return record is not None and record.id == self.broker_id

    def owner_gone(self, record: BrokerRecord) -> bool:
        """True if the owner named by ``record`` is known dead without waiting:
        a broker process of this machine that no longer runs."""
        pid = _local_pid(record.id)
        return pid is not None and pid != os.getpid() and process_gone(pid)

    def may_take(self, queue: str, record: BrokerRecord | None) -> bool:
        """True if this broker may write over an object whose record is ``record``."""
        if record is None or record.id == self.broker_id or self.owner_gone(record):
            return True
        self.observe(queue, record=record)
        w = self._watch(queue)
        return self._monotonic() - w.changed_at >= record.lease_ms / 1000

    def worth_reading(self, queue: str) -> bool:
        """True if a standby should read the watched object whole (to learn its
        record and decide with :meth:`may_take`): its owner's lease is not known
        yet, or the object has been quiet for a whole such lease. An object that
        changed within its owner's lease has a live owner: a ``head`` suffices."""
        lease_s = self._lease_s.get(queue)
        return lease_s is None or self.quiet_for(queue) >= lease_s

    def lease_s(self, queue: str) -> float | None:
        """The lease (s) the owner's record last gave, if one was seen."""
        return self._lease_s.get(queue)

    def quiet_for(self, queue: str) -> float:
        """Seconds since the object was last seen to change (0 if never watched)."""
        w = self._watches.get(queue)
        return 0.0 if w is None else self._monotonic() - w.changed_at
