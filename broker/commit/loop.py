"""The group-commit loop: one owner of one CAS object, one write in flight.

Callers ``await loop.submit(op)``. While a write is in flight, new operations
buffer; when it lands, everything buffered is applied to the state and goes
out as the next single CAS write; only then are those callers answered
("pessimistic ack": acknowledged means durable).

The loop knows nothing about queues: its :class:`~broker.commit.target.CommitTarget`
holds the rules (decode, apply, encode, housekeeping, who may write).

What callers are answered, how open outcomes and storage faults are
resolved, and what ``CommitTarget.prepare`` may refuse: see :mod:`broker.commit`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Generic, TypeVar

from broker.commit.linger import idle_floor_s, linger_s
from broker.commit.offloop import Expired, read_retrying, run_io
from broker.commit.target import CommitStats, CommitTarget, StateT, apply_batch
from broker.commit.verdict import (
    Attempt,
    Outcome,
    Verdict,
    Waiter,
    answer,
    answer_all,
    new_commit_id,
    outcome_unknown,
    verdict,
)
from broker.errors import (
    BrokerUnavailable,
    Conflict,
    OsqueueError,
    StorageError,
    StorageRefused,
    StorageUnavailable,
)
from broker.gcpause import gc_paused
from broker.retry import REAL_TIME, Pause, backoff_delays
from broker.storage import ObjectStore, data_len

log = logging.getLogger("osqueue.commit")

OpT = TypeVar("OpT")
ResultT = TypeVar("ResultT")


class CommitLoop(Generic[StateT, OpT, ResultT]):
    """Group commit for one object. Create inside a running event loop.

    ``commit_timeout_s`` bounds how long one batch waits on failing storage
    before its callers are answered; ``fault_retry_s`` how soon a loop whose
    last batch failed re-reads the object on its own. ``pause`` is what a
    batch's and a read's retries wait on and count ``commit_timeout_s`` on
    (real time; a test may skip the waits: :class:`broker.retry.Pause`).
    """

    def __init__(
        self,
        store: ObjectStore,
        key: str,
        target: CommitTarget[StateT, OpT, ResultT],
        writer: str,
        executor: Executor,
        *,
        clock: Callable[[], int],
        on_commit: Callable[[StateT, list[Outcome[ResultT]]], None] | None = None,
        on_timer: Callable[[StateT], None] | None = None,
        observe: Callable[[float, int, int], None] | None = None,
        max_batch: int = 10_000,
        linger_fraction: float = 0.25,
        max_linger_s: float = 0.05,
        commit_timeout_s: float = 30.0,
        fault_retry_s: float = 2.0,
        pause: Pause = REAL_TIME,
    ) -> None:
        self.store = store
        self.key = key
        self.target = target
        self.writer = writer
        self.clock = clock
        self.stats = CommitStats()
        self.state: StateT | None = None
        self.etag: str | None = None
        self.active = False  # writing: set by reactivate(), cleared by step_down()
        # False until a write of ours lands after (re)activation: until then a
        # foreign owner is the one we are taking over from, not our successor.
        self.owned = False
        self.step_down_error: OsqueueError | None = None
        #: Why the last batch failed (None once a commit or re-read succeeds).
        self.fault: str | None = None
        self._executor = executor
        self._on_commit = on_commit
        self._on_timer = on_timer
        self._observe = observe
        self._max_batch = max_batch
        self._linger_fraction = linger_fraction
        self._max_linger_s = max_linger_s
        self._commit_timeout_s = commit_timeout_s
        self._fault_retry_s = fault_retry_s
        self._pause = pause
        self._buffer: list[Waiter[OpT, ResultT]] = []
        self._batch: list[Waiter[OpT, ResultT]] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._idle_commits = 0  # timer-driven commits in a row (reset by a write)
        # The state dropped for a re-read: what only it holds (see CommitTarget.carry)
        # goes into the state read next.
        self._dropped: StateT | None = None
        self._attempted = False  # the current batch has had a write attempt

    # -- public ---------------------------------------------------------------
    async def load(self, deadline: float | None = None) -> StateT:
        """Read the object (or start empty). Raises ``StateError`` on a bad object,
        ``StorageRefused`` on a refusal, ``StorageUnavailable`` if storage keeps
        failing for ``commit_timeout_s`` (or until ``deadline``, a ``pause.now()``
        time, when given)."""
        try:
            await self._reload(self._pause.now() + self._commit_timeout_s
                               if deadline is None else deadline)
        except Expired as exp:
            raise StorageUnavailable(f"could not read {self.key}: {exp.last}") from None
        assert self.state is not None
        return self.state

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.key)
            self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """The loop's task ended: if cancelled (even before its first step, when
        ``_run`` never reached its own handler), nothing buffered will be written."""
        if task.cancelled():
            self._fail_all(BrokerUnavailable("broker is shutting down"))

    async def submit(self, op: OpT) -> ResultT:
        """Queue ``op`` for the next commit; return its result once durable, or
        raise what refused it (see the module docstring)."""
        if self._closing:
            raise self.step_down_error or BrokerUnavailable("broker is shutting down")
        if not self.active and self.step_down_error is not None:
            raise self.step_down_error
        if self._task is not None and self._task.done():  # (cancelled: nothing would answer)
            raise BrokerUnavailable("broker is shutting down")
        fut: asyncio.Future[ResultT] = asyncio.get_running_loop().create_future()
        self._buffer.append(Waiter(op, fut))
        self._wake.set()
        return await fut

    def poke(self) -> None:
        """Look at the target's timers again (it has new housekeeping to write,
        e.g. archived jobs to drop)."""
        self._wake.set()

    def reactivate(self) -> None:
        """Start (again) writing: the object is re-read, then taken over."""
        self.active = True
        self.owned = False
        self.step_down_error = None
        self.state = self._dropped = None
        self._wake.set()

    async def close(self, timeout_s: float | None = None) -> None:
        """Flush what is buffered, then stop; after ``timeout_s`` stop anyway,
        answering whoever still waits with ``BrokerUnavailable``."""
        self._closing = True
        self._wake.set()
        task = self._task
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            log.warning("%s: not flushed within %.1fs (storage down?); stopping anyway",
                        self.key, timeout_s or 0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._fail_all(BrokerUnavailable("broker is shutting down"))

    def abort(self) -> None:
        """Stop at once, flushing nothing: the loop's task is cancelled, so what it
        had buffered is answered ``BrokerUnavailable`` and never written (a write
        already sent may still land: its callers get ``OutcomeUnknown``). For a
        shutdown that is itself cancelled: a loop left running would go on
        committing (timer commits, spills) beside a successor."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()

    def step_down(self, error: OsqueueError) -> None:
        """Stop writing (another writer owns the object); answer ``error`` from now on."""
        log.warning("%s: another broker owns the object now; stepping down (%s)",
                    self.key, error)
        self.stats.step_downs += 1
        self.active = False
        self.step_down_error = error
        self._fail_all(error)

    # -- the loop ---------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            try:
                if await self._round():
                    return
            except asyncio.CancelledError:  # (what was buffered: answered by _ended)
                raise
            except Exception:  # never let the loop end: answer, back off, go on
                log.exception("%s: unexpected error in the commit loop", self.key)
                self.stats.faults += 1
                self._fail_all(OsqueueError(f"internal error in the commit loop of {self.key}"))
                self._drop_state()
                await asyncio.sleep(self._fault_retry_s)

    async def _round(self) -> bool:
        """Wait for work, then commit one batch; True once closed and drained."""
        if not self._buffer and not self._closing:
            timeout = self._timer_timeout()
            if timeout is None or timeout > 0:
                self._wake.clear()  # nothing buffered: the timers were just looked at
                woken = await self._woken(timeout)  # (not woken: a timer is due, commit it)
                if woken and not self._buffer and not self._closing:
                    return False  # poked: look at the timers again
        self._wake.clear()
        if self._closing and not self._buffer:
            return True
        # A timer (lease renewal, say) falling due just as a batch was answered
        # waits for that batch's callers too: a commit of housekeeping alone
        # would make them all wait for two writes.
        await self._linger(timer=not self._buffer)
        batch = self._batch = self._buffer[: self._max_batch]
        del self._buffer[: len(batch)]
        if not self.active:
            answer_all(batch, self.step_down_error or BrokerUnavailable("not active"))
            return False
        if not batch:
            self._idle_commits += 1
        self._attempted = False
        try:
            await self._commit(batch)
        except asyncio.CancelledError:
            if self._attempted:  # a write of this batch may still land
                self._answer_unknown(batch, BrokerUnavailable("broker is shutting down"))
            self._fail_all(BrokerUnavailable("broker is shutting down"))
            raise
        except Exception as exc:  # never let one batch end the loop
            self._faulted(exc, batch)
        finally:
            self._batch = []
        if self.state is not None and self._on_timer is not None:
            self._on_timer(self.state)
        return False

    def _faulted(self, exc: Exception, batch: list[Waiter[OpT, ResultT]]) -> None:
        if isinstance(exc, OsqueueError):
            error = exc
            log.warning("%s: batch failed: %s", self.key, exc)
        else:
            log.exception("%s: unexpected error in the commit loop", self.key)
            error = OsqueueError(f"internal error committing to {self.key}: "
                                 f"{type(exc).__name__}: {exc}")
        self.stats.faults += 1
        self.fault = f"{error.code}: {error.message}"
        self._drop_state()  # the in-memory state may be half-applied: re-read it
        self.etag = None
        answer_all(batch, error)

    async def _linger(self, timer: bool = False) -> None:
        """Let the callers the last commit just answered join this one, for at
        most :func:`~broker.commit.linger.linger_s` (``timer``: the commit is
        for a due timer with nothing buffered yet)."""
        want = self.stats.last_batch
        budget = linger_s(buffered=len(self._buffer), last_batch=want, timer=timer,
                          closing=self._closing, last_commit_s=self.stats.last_commit_s,
                          fraction=self._linger_fraction, cap_s=self._max_linger_s)
        if not budget:
            return
        deadline = time.monotonic() + budget
        while len(self._buffer) < want:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._wake.clear()
            if not await self._woken(left):
                return

    async def _woken(self, timeout_s: float | None) -> bool:
        """Wait until woken (:meth:`poke`, a submit) or ``timeout_s`` seconds passed
        (None: no limit); whether woken. Raises ``CancelledError`` if the task is
        cancelled meanwhile, even as the wake comes: not ``asyncio.wait_for``,
        which on Python 3.11 then returns as if woken and swallows the
        cancellation (the loop of a broker killed or stopped went on writing)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()
        except TimeoutError:
            return False
        return True

    def _timer_timeout(self) -> float | None:
        if not self.active:
            return None
        if self.state is None:
            return self._fault_retry_s if self.fault is not None else None
        now = self.clock()
        due = self.target.next_timer_ms(self.state, now)
        if due is None:
            return None
        return max(idle_floor_s(self._idle_commits), (due - now) / 1000)

    def _drop_state(self) -> None:
        """Forget the in-memory state (re-read it next), keeping it for
        :meth:`CommitTarget.carry` until the next read."""
        if self.state is not None:
            self._dropped = self.state
        self.state = None

    def _fail_all(self, error: OsqueueError) -> None:
        answer_all(self._batch + self._buffer, error)
        self._buffer.clear()

    def _carry(self) -> None:
        if self._dropped is not None and self.state is not None:
            self.target.carry(self._dropped, self.state, self.clock())
        self._dropped = None

    async def _reload(self, deadline: float) -> None:
        """Read the committed object into ``state``; raise ``Expired`` past
        ``deadline``, a ``StateError`` or ``StorageRefused`` at once."""
        got = await read_retrying(self._executor, self.store, self.key, deadline,
                                  self._pause)
        if got is None:
            self.state, self.etag = self.target.empty(self.clock()), None
        else:
            self.state, self.etag = self.target.decode(got.data), got.etag
            self.stats.state_bytes = len(got.data)
        self.fault = None
        self._carry()
        if got is not None:
            self.target.committed(self.state)

    async def _commit(self, batch: list[Waiter[OpT, ResultT]]) -> None:
        deadline = self._pause.now() + self._commit_timeout_s
        attempts: list[Attempt[ResultT]] = []
        delays = backoff_delays(first_s=0.02)
        reread = False  # re-read once for a refusal of prepare()
        while True:
            if self.state is None:
                if attempts:
                    # (the state dropped under an attempt, the loop reactivated meanwhile:
                    # this re-read would not judge the attempts, one of which may have
                    # landed since, and the batch would apply over its own copy)
                    self._answer_unknown(batch, None)
                    return
                try:
                    await self._reload(deadline)
                except Expired as exp:
                    self._give_up(batch, attempts, exp.last)
                    return
                assert self.state is not None
                # (another broker may have taken the object over while we could not look)
                if not self._check_owner(self.state, pending=bool(attempts), batch=batch):
                    return
            state = self.state
            assert state is not None
            try:  # (the target loads what the ops need: segment windows)
                await self.target.prepare(state, [i.op for i in batch], self.clock())
            except Exception as refusal:  # (an earlier attempt may still land: answer so)
                exc = refusal if isinstance(refusal, OsqueueError) else StorageUnavailable(
                    f"reading what {self.key}'s batch needs failed: {refusal}")
                self._drop_state()
                # Our state may be behind the object: read it again; not after an attempt
                # (the re-read would not judge it: one landed meanwhile would apply twice).
                if not reread and not attempts:
                    reread = True
                    continue
                (self._answer_unknown if attempts else answer_all)(batch, exc)
                return
            if self.state is not state:
                continue
            now = self.clock()
            exists = self.etag is not None
            with gc_paused():
                results, changed, bad = apply_batch(self.target, state,
                                                    [i.op for i in batch], now, exists)
            if bad is not None:
                # Answer that call alone; it may have half-applied the state, so
                # re-read it and apply the others again (unless an earlier attempt of
                # theirs may still land: then nobody can tell them apart any more).
                index, failure = bad
                log.error("%s: applying one call failed", self.key, exc_info=failure)
                self._drop_state()
                if attempts:  # an earlier attempt, this call in it, may still land
                    self._answer_unknown(batch, failure)
                    return
                answer(batch[index], OsqueueError(
                    f"internal error applying this call: {type(failure).__name__}: {failure}"))
                batch = self._batch = batch[:index] + batch[index + 1:]
                continue
            if not changed and not attempts:
                for item, result in zip(batch, results, strict=True):
                    answer(item, result)
                return
            started = time.perf_counter()
            try:  # (objects the new state references are written before it)
                await self.target.before_write(state, now)
            except Exception as failure:  # (objects it wrote are unreferenced: swept)
                if attempts:  # an earlier attempt of this batch may still land
                    self._answer_unknown(batch, failure)
                self._faulted(failure, batch)
                return
            if self.state is not state:
                continue  # reactivated meanwhile: re-read and apply again
            # With an earlier attempt that may still land, even an unchanged state is
            # written: the write fences that attempt out (both are conditional on
            # the same version), so the answer given is the one that landed.
            commit = new_commit_id()
            base_commit, _ = self.target.identity(state)
            attempt = Attempt(commit, base_commit, self.etag, results)
            attempts.append(attempt)
            self._attempted = True
            with gc_paused():
                data = self.target.encode(state, self.writer, now, commit)
            try:
                if attempt.base_etag is None:
                    etag = await run_io(self._executor, self.store.create_if_absent, self.key, data)
                else:
                    etag = await run_io(self._executor, self.store.write_if_match, self.key,
                                       data, attempt.base_etag)
            except StorageRefused as exc:
                # Refused for good: this attempt did not land; an earlier one may have.
                self._drop_state()
                if len(attempts) > 1:
                    self._give_up(batch, attempts[:-1], exc)
                else:
                    answer_all(batch, exc)
                return
            except StorageError as exc:
                # Conflict included: after a lost reply the store's own retry sees 412.
                if isinstance(exc, Conflict):
                    self.stats.conflicts += 1
                else:
                    self.stats.unknown_outcomes += 1
                    log.warning("write of %s had an unknown outcome (%s); re-reading",
                                self.key, exc)
                self._drop_state()
                try:
                    await self._reload(deadline)
                except (Expired, StorageRefused) as exp:
                    # (a refused re-read says nothing of the write before it, which
                    # may have landed: the batch is answered OutcomeUnknown)
                    self._give_up(batch, attempts, exp.last if isinstance(exp, Expired) else exp)
                    return
                fresh = self.state
                assert fresh is not None
                _, lineage = self.target.identity(fresh)
                seq = self.target.seq(fresh)
                verdicts = [verdict(a, lineage=lineage, seq=seq, etag=self.etag)
                            for a in attempts]
                landed = [a for a, v in zip(attempts, verdicts, strict=True)
                          if v is Verdict.LANDED]
                if landed:
                    self._landed(batch, landed[0], fresh, started, reread=True)
                    return
                if Verdict.UNKNOWN in verdicts:
                    self._answer_unknown(batch, exc)
                    self._check_owner(fresh, pending=False)
                    return
                if not self._check_owner(fresh, pending=Verdict.PENDING in verdicts,
                                         batch=batch):
                    return
                if self._pause.now() >= deadline:
                    self._give_up(batch, attempts, exc)
                    return
                if not isinstance(exc, Conflict):
                    await self._pause.sleep(next(delays))
                continue
            self.etag = etag
            self.stats.state_bytes = data_len(data)
            self._landed(batch, attempt, state, started)
            return

    def _landed(self, batch: list[Waiter[OpT, ResultT]], attempt: Attempt[ResultT],
                state: StateT, started: float, *, reread: bool = False) -> None:
        elapsed = time.perf_counter() - started
        self._idle_commits = 0
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: committed %d op(s) in %.1f ms", self.key, len(batch), elapsed * 1000)
        self.state = state
        self.owned = True
        self.fault = None
        self.stats.commits += 1
        self.stats.last_commit_s = elapsed
        self.stats.last_batch = len(batch)
        if self._observe is not None:
            self._observe(elapsed, len(batch), self.stats.state_bytes)
        if self._on_commit is not None:
            self._on_commit(state, attempt.outcomes)
        for item, result in zip(batch, attempt.outcomes, strict=True):
            answer(item, result)
        if not reread:  # a re-read state was reported by _reload already
            self.target.committed(state)
        self._check_owner(state, pending=False)

    def _check_owner(self, fresh: StateT, *, pending: bool,
                     batch: list[Waiter[OpT, ResultT]] | None = None) -> bool:
        """True if this writer may go on writing over ``fresh``; else step down
        (answering ``batch`` too: with OutcomeUnknown where an attempt may
        still land, else with the target's error)."""
        error = self.target.may_write(fresh, self.owned)
        if error is None:
            return True
        if batch is not None:
            if pending:
                self._answer_unknown(batch, error)
            else:
                answer_all(batch, error)
        self.step_down(error)
        return False

    def _answer_unknown(self, batch: list[Waiter[OpT, ResultT]],
                        cause: BaseException | None) -> None:
        self.stats.answered_unknown += 1
        answer_all(batch, outcome_unknown(self.key, cause))

    def _give_up(self, batch: list[Waiter[OpT, ResultT]], attempts: list[Attempt[ResultT]],
                 last: BaseException | None) -> None:
        """Storage failed for the whole batch timeout: answer and move on."""
        self._drop_state()
        self.fault = f"storage unavailable: {last}"
        self.stats.faults += 1
        if attempts:
            self._answer_unknown(batch, last)
        else:
            answer_all(batch, StorageUnavailable(
                f"storage did not answer for {self._commit_timeout_s:.0f}s ({last}); "
                "nothing was written"))
