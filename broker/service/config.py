"""A broker's configuration (:class:`BrokerConfig`): what ``osqueue-broker``'s flags
(:class:`broker.flags.BrokerFlags`) and ``start_broker()``'s arguments become. Times in
seconds, sizes in bytes. (A queue's own settings, stored in its object, are
:class:`broker.model.state.QueueSettings`; ``default_settings`` gives new queues theirs.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker import limits
from broker.limits import BROKER_LEASE_S
from broker.service.ownership import new_broker_id
from broker.service.staging import SWEEP_S


@dataclass
class BrokerConfig:
    """One broker's configuration. Times in seconds, sizes in bytes."""

    url: str = ""
    broker_id: str = field(default_factory=new_broker_id)
    lease_s: float = BROKER_LEASE_S
    max_wait_s: float = 60.0
    max_request_bytes: int = 64 * 1024 * 1024
    #: slow clients (see :mod:`broker.http.connections`): a request's headers must arrive
    #: within header_timeout_s, a body may pause at most body_timeout_s (408 past
    #: either); at most max_connections open connections (503 past it)
    header_timeout_s: float = limits.DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = limits.DEFAULT_BODY_TIMEOUT_S
    max_connections: int = limits.DEFAULT_MAX_CONNECTIONS
    #: most of them from one client address (None: half of max_connections); idle and
    #: unheard connections are shed first to make room (see broker.http.admission)
    max_connections_per_address: int | None = None
    #: addresses or networks of the proxies whose X-Forwarded-For/-Proto are believed
    trusted_proxies: tuple[str, ...] = ()
    #: wrong tokens one client address may present a minute before its requests get
    #: 429 (0: no limit; see broker.http.throttle)
    wrong_tokens_per_min: int = limits.DEFAULT_WRONG_TOKENS_PER_MIN
    io_threads: int = 16
    staged_cache_bytes: int = 256 * 1024 * 1024  # staged chunks kept parsed until publish
    #: a segment object no landed head references is swept once this broker has
    #: listed it for this long (longer than any commit takes to land after the
    #: segment write: see :mod:`broker.service.segment_store`)
    segment_grace_s: float = 600.0
    #: a push of at least this many jobs sharing their options, none with a key (a
    #: Spark publish, a bulk push) goes into segment objects the queue object
    #: references (0: no push does)
    segment_push_jobs: int = 10_000
    #: ... and so does a push of at least this many bytes of payload (0: not by
    #: size), so that large payloads never make a large queue object
    segment_push_bytes: int = 64 * 1024
    #: ... and such a push whose jobs have groups goes into grouped segment objects
    #: (format 3) too; off, it goes into the queue object (see docs/groups.md)
    grouped_segments: bool = True
    #: a claim from an (ungrouped) segment names its jobs in its claim record
    #: (``{"seg": key, "at": runs}``) instead of moving them into the queue object,
    #: their lines kept in a per-queue cache of at most ``held_cache_mb`` MiB; off,
    #: such a claim moves its jobs into the queue object (docs/architecture.md)
    held_in_records: bool = True
    held_cache_mb: int = 256
    #: past this many dead jobs in a queue object (or ``spill_bytes`` of their
    #: estimated lines), a commit writes them all into an immutable spill object the
    #: object references instead (0: never; docs/architecture.md, "Spill objects")
    spill_jobs: int = 0
    spill_bytes: int = 256 * 1024
    #: ... and their pending job objects too (retry-waiting, released: pending
    #: spill objects claims take from); off by default while it is new
    spill_pending: bool = False
    #: how often this broker sweeps the staging and segment objects of the queues
    #: it serves (an object is deleted at the first sweep past its grace period)
    sweep_s: float = SWEEP_S
    self_test: bool = True
    #: start-up (self-test, listing and loading the queue objects) retries transient
    #: storage errors for this long before it gives up with the last one (0: never)
    startup_timeout_s: float = limits.DEFAULT_STARTUP_TIMEOUT_S
    #: a batch waits this long on failing storage at most
    commit_timeout_s: float = limits.DEFAULT_COMMIT_TIMEOUT_S
    default_settings: dict[str, Any] = field(default_factory=dict)
    #: the dashboard (/ui/) shows the queues and refuses every action
    ui_read_only: bool = False
    #: seconds between the samples of the dashboard's charts (broker.service.history)
    history_interval_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 <= self.startup_timeout_s <= limits.MAX_STARTUP_TIMEOUT_S:
            raise ValueError(f"startup_timeout_s must be within [0, "
                             f"{limits.MAX_STARTUP_TIMEOUT_S:g}] seconds")
