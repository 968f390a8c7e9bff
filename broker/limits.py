"""Every limit the queue enforces, each under one name.

The rules (:mod:`broker.model.transitions`), the queue object's checks
(:mod:`broker.model.format.decode`), the HTTP layer (:mod:`broker.http.parsers`) and the OpenAPI
document all read these names; none restates a number. Units are in the
names (``_MS`` milliseconds, ``_S`` seconds, ``_CHARS`` characters).
"""

from __future__ import annotations

import math
from typing import Any

# -- jobs ------------------------------------------------------------------------

#: Priorities lie within +-MAX_PRIORITY (higher is claimed first).
MAX_PRIORITY = 1_000_000

#: Longest delay, retry delay or backoff (ms): ten years keeps every time a
#: job can get far inside the heap keys' 48 bits and the year 9999.
MAX_DELAY_MS = 10 * 365 * 86_400_000
MAX_DELAY_S = MAX_DELAY_MS / 1000

#: Longest lease a claim or heartbeat may ask for (ms).
MAX_LEASE_MS = 24 * 3600 * 1000
MAX_LEASE_S = MAX_LEASE_MS / 1000
#: Shortest lease (s) the HTTP API accepts, and the default.
MIN_LEASE_S = 0.001
DEFAULT_LEASE_S = 30.0

#: A job may be tried at most this many times (per job and per queue setting).
MAX_ATTEMPTS = 1000

#: A failure's error text is cut to its last MAX_ERROR_CHARS characters.
MAX_ERROR_CHARS = 4000
#: Most failures a job's error history keeps: its first attempt's (usually the real
#: cause) and the ERRORS_KEPT - 1 latest (what is happening now); see
#: :func:`broker.model.format.spill_format.bounded_errors`.
ERRORS_KEPT = 8

#: Deepest nesting a payload or result may have: well inside what orjson writes
#: (254 levels), with room for the documents that carry a payload (a queue
#: object, an answer, a Spark row) and for the broker to write back what it reads.
MAX_DEPTH = 200

# -- requests --------------------------------------------------------------------

#: Most items (jobs, tokens, outcomes) in one request.
MAX_ITEMS = 100_000
#: Most jobs one page of a job listing may hold.
MAX_PAGE_JOBS = 10_000
#: Most jobs one claim may take, and the longest a claim may wait (s).
MAX_CLAIM_JOBS = 10_000
MAX_WAIT_S = 3_600.0
#: Longest idempotency key of a job, and longest once-key of a publish.
MAX_KEY_CHARS = 512
#: The most characters (code points) of a job's group name.
MAX_GROUP_CHARS = 128
MAX_ONCE_CHARS = 512
#: Longest worker name, fencing token, write id and staging prefix.
MAX_WORKER_CHARS = 200
MAX_TOKEN_CHARS = 300
MAX_WRITE_ID_CHARS = 300
MAX_PREFIX_CHARS = 300
#: ``Idempotency-Key`` header: 1..MAX_REQUEST_KEY_CHARS printable ASCII;
#: ``Idempotency-Floor``: a decimal of at most MAX_FLOOR_DIGITS digits.
MAX_REQUEST_KEY_CHARS = 200
MAX_FLOOR_DIGITS = 18
#: Queue names: a letter or digit, then up to 127 of letters, digits, ``._-``
#: (and never ``..``). The pattern is JSON Schema's (the OpenAPI document's), where
#: ``$`` ends the text; Python matches it with ``fullmatch`` (its ``$`` also
#: matches before a final line break).
MAX_QUEUE_NAME_CHARS = 128
QUEUE_NAME_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_QUEUE_NAME_CHARS - 1}}}$"

# -- brokers -------------------------------------------------------------------

#: The broker lease (s) one may configure: other brokers take a queue over when
#: its owner wrote nothing for this long (see :mod:`broker.service.ownership`).
#: The lease a broker writes into its record unless configured otherwise (s):
#: how long it may go without writing before a standby may take its queues.
BROKER_LEASE_S = 30.0
MIN_BROKER_LEASE_S = 0.5
MAX_BROKER_LEASE_S = 3600.0
#: The longest broker lease a queue object's record may carry when read (s):
#: wider than what may be set, so an object stays loadable whatever wrote it.
MAX_RECORDED_BROKER_LEASE_S = 86_400.0
#: How long (s) a batch may wait on failing storage before its callers are answered.
MIN_COMMIT_TIMEOUT_S = 0.1
MAX_COMMIT_TIMEOUT_S = 3600.0
DEFAULT_COMMIT_TIMEOUT_S = 30.0
#: How long (s) a broker's start-up (self-test, listing and loading the queue
#: objects) rides out transient storage errors before it gives up; 0: not at all.
DEFAULT_STARTUP_TIMEOUT_S = 60.0
MAX_STARTUP_TIMEOUT_S = 86_400.0
#: Longest job id (``j`` and up to 15 digits: seqs fit 48 bits).
MAX_JOB_ID_CHARS = 16

# -- connections -----------------------------------------------------------------

#: A client must send a request's line and headers within DEFAULT_HEADER_TIMEOUT_S
#: of its first byte (or of connecting), and may pause at most
#: DEFAULT_BODY_TIMEOUT_S between two pieces of a body; past either it gets 408
#: and its connection is closed (a connection whose send buffer stays full, its
#: client reading nothing, is dropped after DEFAULT_BODY_TIMEOUT_S too). Each is a
#: broker setting within
#: (0, MAX_CLIENT_TIMEOUT_S].
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
MAX_CLIENT_TIMEOUT_S = 3600.0
#: Most connections a broker holds open at once (a broker setting); one more is
#: answered 503 broker_unavailable and closed.
DEFAULT_MAX_CONNECTIONS = 1000
MAX_CONNECTIONS = 1_000_000
#: Largest request line and headers of one request (bytes): 431 past it.
MAX_HEADER_BYTES = 64 * 1024
#: Once this fraction of max_connections (or of one client address's share) is
#: open, a new connection must send its first byte within BUSY_FIRST_BYTE_S
#: (instead of the header timeout), so silent connections let go of their place
#: sooner (see :mod:`broker.http.admission`).
BUSY_FRACTION = 0.75
BUSY_FIRST_BYTE_S = 2.0

# -- wrong tokens ----------------------------------------------------------------

#: Wrong bearer tokens one client address may present a minute (the API and the
#: dashboard's login together) before its requests get 429 (a broker setting;
#: 0: no limit). See :mod:`broker.http.throttle`.
DEFAULT_WRONG_TOKENS_PER_MIN = 10
MAX_WRONG_TOKENS_PER_MIN = 1_000_000
#: Most client addresses whose wrong tokens are remembered at once: past it the
#: address that failed longest ago is forgotten (memory stays bounded whatever
#: an attacker rotating addresses does).
MAX_THROTTLED_ADDRESSES = 10_000
#: Refused tokens are logged one line per window of this many seconds (its first
#: refusal in full, the rest summed up at its end).
REFUSAL_SUMMARY_S = 60.0

# -- windows ---------------------------------------------------------------------

#: Publish keys (Spark writes and stream batches, once each) are kept in a window
#: of their own, so a stream of idempotency keys never evicts the key that makes a
#: retried Spark commit a no-op: for dedup_ttl_s, at most dedup_keys of them but
#: never fewer than this.
ONCE_KEYS_MIN = 1_000


def dedup_cutoff_ms(dedup_ttl_s: float, now_ms: int) -> int:
    """The oldest time (ms) an idempotency or once-key entry may carry and still count."""
    return now_ms - round(dedup_ttl_s * 1000)


# -- per-queue settings ----------------------------------------------------------

#: The highest dispatch rate limit a queue may set (jobs claimed per second),
#: and the largest burst (jobs): see :mod:`broker.model.ratelimit`.
MAX_CLAIMS_PER_S = 1_000_000.0
MAX_CLAIM_BURST = 10_000_000

#: Groups (see :mod:`broker.model.groups`): a group's name is 1..MAX_GROUP_CHARS
#: characters; the settings' bounds (``group_limit``, ``group_limits``,
#: ``group_weights``, ``group_rate_per_s``, ``group_burst``), the most keys the
#: two maps hold together, and the most bytes the group settings take as JSON.
MAX_GROUP_CHARS = 128
MAX_GROUP_LIMIT = 1_000_000
MAX_GROUP_WEIGHT = 1_000
MAX_GROUP_RATE_PER_S = MAX_CLAIMS_PER_S
#: The smallest rate other than 0 that ``max_claims_per_s`` and ``group_rate_per_s``
#: take (a token every 1,000 s): the buckets count whole nano-tokens a ms, so a
#: rate below 0.000001 a second would never refill and strand the jobs it gates.
MIN_RATE_PER_S = 0.001
MAX_GROUP_BURST = MAX_CLAIM_BURST
MAX_GROUP_KEYS = 10_000
MAX_GROUP_SETTINGS_BYTES = 512 * 1024

#: Each setting's type and allowed range (inclusive); see :class:`broker.model.state.QueueSettings`.
SETTING_LIMITS: dict[str, tuple[type, float, float]] = {
    "max_attempts": (int, 1, MAX_ATTEMPTS),
    "backoff_base_s": (float, 0.001, MAX_DELAY_S),
    "backoff_max_s": (float, 0.001, MAX_DELAY_S),
    "dedup_keys": (int, 0, 10_000_000),
    "dedup_ttl_s": (float, 1.0, 365 * 86_400.0),
    "max_payload_bytes": (int, 16, 64 * 1024 * 1024),
    "max_state_bytes": (int, 64 * 1024, 1 << 40),
    "staged_ttl_s": (float, 1.0, 30 * 86_400.0),
    "retry_ttl_s": (float, 1.0, 7 * 86_400.0),
    "retry_keys": (int, 1_000, 10_000_000),
    # dispatch rate limit (0: none), a token bucket (see broker.model.ratelimit)
    "max_claims_per_s": (float, 0.0, MAX_CLAIMS_PER_S),
    "claim_burst": (int, 0, MAX_CLAIM_BURST),
}


def check_setting(name: str, value: Any) -> int | float:
    """``value`` as setting ``name`` takes it; raises ``ValueError`` saying what
    is allowed (an unknown name, a wrong type, a value out of range)."""
    limits = SETTING_LIMITS.get(name)
    if limits is None:
        raise ValueError(f"unknown setting {name!r:.60}; known: {sorted(SETTING_LIMITS)}")
    kind, lo, hi = limits
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and not math.isfinite(value)):
        raise ValueError(f"setting {name} must be a number, got {value!r:.60}")
    if kind is int and not (isinstance(value, int) or value.is_integer()):
        raise ValueError(f"setting {name} must be a whole number, got {value!r:.60}")
    if not lo <= value <= hi:
        raise ValueError(f"setting {name} must be within [{lo:g}, {hi:g}], got {value!r:.60}")
    return int(value) if kind is int else float(value)
