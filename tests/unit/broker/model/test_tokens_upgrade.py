"""Leases granted before tokens were tagged, through a broker upgrade
(broker.model.tokens.checker, ``untagged_fences``).

A worker that claimed from a broker from before tokens were tagged holds
``j0000000001.1``. The upgraded broker gives the object a key when it loads
it; before the fix it then refused that token as not valid for the queue,
so the finished work was redone (or, on a job's last attempt, the job went
dead). Now the object records the lease counter at that moment
(``"untagged_fences": N``) and takes an untagged token with fence <= N until
no lease that old is held; every other untagged token is refused, changing
nothing.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.model import tokens
from broker.model import transitions as T
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.storage import FileStore
from tests.support.faults import Clock
from tests.support.inprocess import archive_lines, run, started, stored
from tests.support.states import new_queue, tagged

NOT_VALID = tokens.NOT_VALID


def _raw(store: FileStore) -> bytes:
    return store.read(paths.state_key("q")).data


def _as_the_old_broker_wrote_it(store: FileStore) -> None:
    """The queue object without its token key, as a broker from before tags wrote it."""
    got = store.read(paths.state_key("q"))
    raw = orjson.loads(got.data)
    del raw["token_key"]
    store.write_if_match(paths.state_key("q"), orjson.dumps(raw), got.etag)


async def _old_lease(store: FileStore, clock: Clock, lease_s: float = 600) -> str:
    """Two jobs pushed and the first claimed by the old broker: the worker's
    token, untagged (``j0000000001.1``)."""
    a = await started(store, "http://a", clock)
    await a.push("q", [NewJob(b"1"), NewJob(b"2")])
    [held] = await a.claim("q", "w-old", lease_s=lease_s)
    await a.stop(drain_s=5)
    _as_the_old_broker_wrote_it(store)
    old = tokens.stored_part(held.token)
    assert old == "j0000000001.1"
    return old


def test_an_untagged_token_from_before_the_upgrade_completes_its_job_once(
        tmp_path: Path) -> None:
    """The old worker heartbeats and completes with its untagged token: ok, the
    job is completed once; the listing shows that lease's token tagged."""
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        old = await _old_lease(store, clock)
        b = await started(store, "http://b", clock)
        [beat] = await b.heartbeat("q", [old], lease_s=600)
        assert beat.ok, beat.reason
        assert orjson.loads(_raw(store))["untagged_fences"] == 1
        [listed] = await b.jobs("q", status="claimed", tokens=True)
        assert listed["lease"]["token"] == tokens.Tagger(
            bytes.fromhex(stored(store).token_key), "q").tag(old)
        [answer] = await b.complete("q", [CompleteItem(old, b'"done"')])
        assert answer.ok and answer.status == "completed", answer.reason
        await b.stop(drain_s=5)

    run(main())
    state = stored(store)
    assert state.counters.completed == 1 and state.counters.failed == 0
    assert state.jobs.get(1) is None or state.jobs[1].status == "completed"
    [line] = archive_lines(store)  # (completed jobs leave the object once archived)
    assert (line["id"], line["result"], line["attempts"]) == ("j0000000001", "done", 1)


def test_new_leases_are_tagged_and_untagged_tokens_past_the_old_ones_change_nothing(
        tmp_path: Path) -> None:
    """After the upgrade a claim's token is tagged; its untagged form, and a
    made-up untagged token with a fence above N, are refused by heartbeat,
    complete and fail with the object byte-identical."""
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        await _old_lease(store, clock)
        b = await started(store, "http://b", clock)
        [new] = await b.claim("q", "w-new", lease_s=600)
        assert tokens.SEP in new.token and tokens.stored_part(new.token) == "j0000000002.2"
        assert orjson.loads(_raw(store))["untagged_fences"] == 1
        before = _raw(store)
        for bad in ("j0000000002.2", "j0000000001.2", "j0000000001.01", "j1.1"):
            [beat] = await b.heartbeat("q", [bad])
            [done] = await b.complete("q", [CompleteItem(bad)])
            [failed] = await b.fail("q", [FailItem(bad, "x")])
            assert [beat.reason, done.reason, failed.reason] == [NOT_VALID] * 3, bad
            assert _raw(store) == before, bad
        [answer] = await b.complete("q", [CompleteItem(new.token)])
        assert answer.ok
        await b.stop(drain_s=5)

    run(main())


@pytest.mark.parametrize("end", ["completed", "reclaimed"])
def test_the_field_is_dropped_once_the_old_lease_ends(tmp_path: Path, end: str) -> None:
    """Once no held lease is that old (completed, or expired and reclaimed), the
    next write leaves ``untagged_fences`` out, and the untagged form of the old
    token is refused from then on."""
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        old = await _old_lease(store, clock, lease_s=60)
        b = await started(store, "http://b", clock)
        [new] = await b.claim("q", "w-new", lease_s=600)  # a tagged lease stays held
        assert orjson.loads(_raw(store))["untagged_fences"] == 1
        if end == "completed":
            [answer] = await b.complete("q", [CompleteItem(old)])
            assert answer.ok, answer.reason
        else:
            clock.advance(61)
        await b.push("q", [NewJob(b"3")])  # a commit: its reclaim runs first
        raw = orjson.loads(_raw(store))
        assert "untagged_fences" not in raw and raw["token_key"]
        assert stored(store).untagged_fences == 0
        [beat] = await b.heartbeat("q", [old])
        assert beat.reason == NOT_VALID
        [beat] = await b.heartbeat("q", [new.token])
        assert beat.ok
        await b.stop(drain_s=5)

    run(main())
    state = stored(store)
    if end == "completed":
        assert [r["id"] for r in archive_lines(store)] == ["j0000000001"]
        assert state.counters.completed == 1 and state.counters.reclaimed == 0
    else:
        assert state.jobs[1].status == "pending" and state.counters.reclaimed == 1


def test_checker_takes_untagged_tokens_only_up_to_untagged_fences() -> None:
    """The pure rule: without N the checker is the tagger's own (the hot path
    unchanged); with N, an untagged stored-token spelling with fence 1..N is
    itself, anything else untagged is None, tagged tokens check as before."""
    state = new_queue()
    assert tokens.checker(state) == tokens.tagger(state).stored
    state.counters.fence = state.untagged_fences = 3
    check = tokens.checker(state)
    assert check("j0000000001.3") == "j0000000001.3"
    assert check("j0000000042.1") == "j0000000042.1"
    for bad in ("j0000000001.4", "j0000000001.0", "j0000000001.03", "j0000000001.",
                "j01.1", "x0000000001.1", "j0000000001.1-", "j0000000001.+1", "", "."):
        assert check(bad) is None, bad
    assert check(tagged("j0000000001.9")) == "j0000000001.9"
    assert check(tagged("j0000000001.9")[:-1] + "0") is None


def test_a_state_bound_without_a_key_lets_its_granted_leases_through_untagged() -> None:
    """tokens.bind on a keyless state records its lease counter; on a state
    with a key (a new queue, or one written since) nothing is let through."""
    state = T.new_state(0)
    state.counters.fence = 7
    tokens.bind(state, "q", lambda n: bytes(n))
    assert state.untagged_fences == 7
    fresh = new_queue()
    assert fresh.untagged_fences == 0
