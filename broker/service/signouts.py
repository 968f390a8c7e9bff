"""Dashboard sign-outs that last: one small CAS object that every broker of the
store reads.

A dashboard session is a signed cookie (:mod:`broker.http.ui.auth`) that every
broker with the same token accepts, so a sign-out has to be told to all of
them, and outlive a restart: it is written to the store, in the object
``_osqueue/ui/signed-out.json`` (:data:`broker.paths.SIGNED_OUT_KEY`; no queue
can take the name, queue names start with a letter or digit)::

    {"format": "osqueue-ui-signed-out", "version": 1, "seq": 3,
     "signed_out_before": null,
     "sessions": {"4be0...": "2026-11-26T07:04:05.000Z"}}

Each entry names a session by the first 32 hex digits of the SHA-256 of its
nonce (:func:`session_key`: the store never sees a cookie, and an entry
cannot be turned back into one) with the time it would have expired; an
entry is dropped at the first write after that. At most
:data:`MAX_SIGNED_OUT` entries: past that, the ones that expire first leave
and ``signed_out_before`` rises to when the last of them was issued, so every
session issued up to then is refused (a bound never lets a signed-out session
back in; the open ones issued that early sign in again). ``seq`` grows by
one on every write, so no two versions have the same bytes (S3's etags are
content hashes: see :mod:`broker.storage.base`).

**Writing** (:meth:`SignOuts.record`): read, add, write-if-match (create-if-absent
for the first); a ``Conflict`` (another broker signed someone out meanwhile) or a
write whose outcome is unknown re-reads and tries again, so no sign-out is lost
and one that landed is recognised; after :data:`WRITE_ATTEMPTS` attempts the
sign-out fails (``StorageUnavailable``) and the session stays open.

**Checking** (:meth:`SignOuts.signed_out`): against the object as last read, read
again (a ``head`` first, the bytes only when the etag moved) when that is older
than the caller allows: :data:`CHECK_EVERY_S` for a page, 0 for an action.
When it cannot be read (the store fails, refuses, or the object does not parse)
a session this broker has not vouched for is refused with ``StorageUnavailable``
(503, retryable: fail closed), and one it has (issued here, or found not signed
out by an earlier read) is judged by the last version read;
the broker logs the first failure and the recovery, never a cookie.

Time: wall clock in ms (``clock``) for expiry, monotonic seconds for the cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from broker import paths, timefmt
from broker.errors import (
    Conflict,
    CorruptState,
    NewerState,
    NotFound,
    StorageError,
    StorageUnavailable,
    shown,
)
from broker.retry import backoff_delays
from broker.storage import ObjectStore, Versioned

log = logging.getLogger("osqueue.ui")

FORMAT = "osqueue-ui-signed-out"
VERSION = 1
#: Most sessions the list names (about 70 bytes each); past it the floor rises.
MAX_SIGNED_OUT = 5_000
#: How old the list as last read may be when a page checks a session (s); an action
#: (a POST) always reads its etag again.
CHECK_EVERY_S = 2.0
#: Read-add-write attempts of one sign-out before it fails.
WRITE_ATTEMPTS = 8
#: Sessions this broker vouches for when the list cannot be read (see the module docstring).
MAX_VOUCHED = 10_000

_KEY = re.compile(r"[0-9a-f]{32}")


def session_key(nonce: str) -> str:
    """The name of the session with ``nonce`` in the list (32 hex digits of its SHA-256)."""
    return hashlib.sha256(nonce.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class SignedOut:
    """One version of the list: ``seq``, ``sessions`` (key -> expiry, ms since the
    epoch) and ``before_ms`` (every session issued at or before it is signed out)."""

    seq: int
    sessions: dict[str, int]
    before_ms: int | None

    @classmethod
    def empty(cls) -> SignedOut:
        return cls(0, {}, None)

    def holds(self, key: str, issued_ms: int) -> bool:
        """Whether the session ``key``, issued at ``issued_ms``, is signed out."""
        return key in self.sessions or (self.before_ms is not None and issued_ms <= self.before_ms)

    def adding(self, key: str, expires_ms: int, now_ms: int, ttl_ms: int,
               bound: int = MAX_SIGNED_OUT) -> SignedOut:
        """The next version: ``key`` (expiring at ``expires_ms``) added, the expired
        entries dropped, and past ``bound`` entries the earliest to expire dropped
        with the floor raised over them (sessions last ``ttl_ms``)."""
        kept = {k: until for k, until in self.sessions.items() if until > now_ms}
        kept[key] = max(expires_ms, kept.get(key, 0))
        before = self.before_ms if self.before_ms is not None and \
            self.before_ms + ttl_ms > now_ms else None
        if len(kept) > bound:
            order = sorted(kept, key=kept.__getitem__)
            for gone in order[:len(kept) - bound]:
                issued = kept.pop(gone) - ttl_ms
                before = issued if before is None else max(before, issued)
        return SignedOut(self.seq + 1, kept, before)

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT, "version": VERSION, "seq": self.seq,
            "signed_out_before": None if self.before_ms is None else timefmt.fmt(self.before_ms),
            "sessions": {k: timefmt.fmt(until) for k, until in sorted(self.sessions.items())}}
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


def decode(data: bytes) -> SignedOut:
    """A version of the list from its bytes. Raises ``CorruptState`` for bytes that
    are not one, ``NewerState`` for a newer format version (never overwritten)."""
    where = paths.SIGNED_OUT_KEY
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CorruptState(f"{where} is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CorruptState(f"{where} is not a list of signed-out sessions (format "
                           f"{shown(doc.get('format') if isinstance(doc, dict) else doc)})")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CorruptState(f"{where} has no valid version ({shown(version)})")
    if version > VERSION:
        raise NewerState(f"{where} is version {version}, newer than this broker's "
                         f"{VERSION}: upgrade the brokers that share this store together")
    seq, sessions, before = doc.get("seq"), doc.get("sessions"), doc.get("signed_out_before")
    try:
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError(f"seq {shown(seq)}")
        if not isinstance(sessions, dict):
            raise ValueError(f"sessions {shown(sessions)}")
        parsed = {}
        for key, until in sessions.items():
            if not _KEY.fullmatch(key) or not isinstance(until, str):
                raise ValueError(f"entry {shown(key)}: {shown(until)}")
            parsed[key] = timefmt.parse(until)
        floor = None if before is None else timefmt.parse(before)
    except (ValueError, TypeError) as exc:
        raise CorruptState(f"{where} has a bad field: {exc}") from None
    return SignedOut(seq, parsed, floor)


Io = Callable[..., Awaitable[Any]]


class SignOuts:
    """The store's list of signed-out dashboard sessions, as one broker reads and
    writes it (see the module docstring).

    ``io`` runs a blocking store call off the event loop (the broker's I/O
    threads); ``ttl_s``: how long a session lasts; ``clock``: wall time (ms);
    ``monotonic``: seconds, for the cache.
    """

    def __init__(self, store: ObjectStore, io: Io, *, ttl_s: int,
                 clock: Callable[[], int] = timefmt.now_ms,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.key = paths.SIGNED_OUT_KEY
        self._io = io
        self._ttl_ms = ttl_s * 1000
        self._clock = clock
        self._monotonic = monotonic
        self._list: SignedOut | None = None  # as last read (None: never read)
        self._etag: str | None = None  # of that version (None: there was no object)
        self._checked_at = float("-inf")  # monotonic, of the last read (or attempt)
        self._attempts = 0  # reads (or attempts) started
        self._failing: str | None = None  # why the last read failed
        self._vouched: dict[str, int] = {}  # session key -> expiry (ms)
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SignOuts({self.store.url!r}, read={self._list is not None}, " \
               f"failing={self._failing is not None})"

    def vouch(self, key: str, issued_s: int) -> None:
        """Remember session ``key`` as not signed out (this broker just issued it)."""
        now = self._clock()
        if len(self._vouched) >= MAX_VOUCHED:
            for old in [k for k, until in self._vouched.items() if until <= now]:
                del self._vouched[old]
            while len(self._vouched) >= MAX_VOUCHED:  # (the first vouched expire first)
                del self._vouched[next(iter(self._vouched))]
        self._vouched[key] = issued_s * 1000 + self._ttl_ms

    async def signed_out(self, key: str, issued_s: int, *, max_age_s: float) -> bool:
        """Whether session ``key`` (issued at ``issued_s``, s since the epoch) is
        signed out, by the list read at most ``max_age_s`` ago. Raises
        ``StorageUnavailable`` if the list cannot be read and this broker has not
        vouched for the session (fail closed)."""
        if self._monotonic() - self._checked_at >= max_age_s:
            await self._refresh(self._attempts)
        issued_ms = issued_s * 1000
        if self._failing is not None:
            if key in self._vouched and (self._list is None or
                                         not self._list.holds(key, issued_ms)):
                return False
            raise StorageUnavailable(
                f"cannot tell whether this dashboard session was signed out: the sign-out "
                f"list {self.key} cannot be read ({self._failing}); try again shortly")
        assert self._list is not None
        if self._list.holds(key, issued_ms):
            self._vouched.pop(key, None)
            return True
        self.vouch(key, issued_s)
        return False

    async def _refresh(self, started: int) -> None:
        """Read the list again (its etag, then its bytes if they changed), unless a
        read started since the caller asked (``started`` had started then) has done
        it, or failed, meanwhile."""
        async with self._lock:
            if self._attempts > started:
                return
            self._attempts += 1
            self._checked_at = self._monotonic()
            try:
                try:
                    etag: str | None = await self._io(self.store.head, self.key)
                except NotFound:
                    etag = None
                if etag is None:
                    self._list, self._etag = SignedOut.empty(), None
                elif etag != self._etag or self._list is None:
                    got = await self._read()
                    self._list, self._etag = (SignedOut.empty(), None) if got is None \
                        else (decode(got.data), got.etag)
            except (StorageError, CorruptState, NewerState) as exc:
                self._fail(exc.message)
                return
            self._readable()

    def _fail(self, why: str) -> None:
        if self._failing is None:
            log.warning("ui: cannot read the sign-out list %s (%s): refusing dashboard "
                        "sessions this broker has not seen before (%d it has are judged by "
                        "the list as last read) until it can", self.key, why,
                        len(self._vouched))
        self._failing = why

    def _readable(self) -> None:
        if self._failing is not None:
            log.warning("ui: the sign-out list %s can be read again: dashboard sessions "
                        "are checked against it as before", self.key)
            self._failing = None

    async def _read(self) -> Versioned | None:
        try:
            got: Versioned = await self._io(self.store.read, self.key)
        except NotFound:
            return None
        return got

    async def record(self, key: str, issued_s: int) -> None:
        """Sign session ``key`` (issued at ``issued_s``) out, in the store: returns
        once the list holds it. Raises ``StorageUnavailable`` when the store kept
        failing or losing races for :data:`WRITE_ATTEMPTS` attempts, ``CorruptState``
        or ``NewerState`` for a list this broker must not overwrite, and what the
        store raises for good (``StorageRefused``); the list is then as it was, or
        holds the session (a write whose reply was lost)."""
        expires_ms = issued_s * 1000 + self._ttl_ms
        delays = backoff_delays()
        last: StorageError | None = None
        for _ in range(WRITE_ATTEMPTS):
            try:
                got = await self._read()
                current = SignedOut.empty() if got is None else decode(got.data)
                if current.holds(key, issued_s * 1000):  # (an earlier attempt landed)
                    self._remember(current, None if got is None else got.etag)
                    return
                new = current.adding(key, expires_ms, self._clock(), self._ttl_ms)
                data = new.encode()
                if got is None:
                    etag = await self._io(self.store.create_if_absent, self.key, data)
                else:
                    etag = await self._io(self.store.write_if_match, self.key, data, got.etag)
                self._remember(new, etag)
                return
            except (Conflict, StorageUnavailable) as exc:  # re-read: lost a race, or unknown
                last = exc
            await asyncio.sleep(next(delays))
        assert last is not None
        raise StorageUnavailable(f"could not record the sign-out in {self.key} after "
                                 f"{WRITE_ATTEMPTS} attempts ({last.message}); the session "
                                 "is still open: sign out again")

    def _remember(self, version: SignedOut, etag: str | None) -> None:
        """Keep ``version`` (just read or written) as the list last read."""
        if self._list is None or version.seq >= self._list.seq:
            self._list, self._etag = version, etag
            self._checked_at = self._monotonic()
            self._readable()
