"""broker.service.reads over dead jobs in spill objects (``spill_jobs`` on):
pages of jobs (``GET jobs?status=dead``, on the owner and from the stored
head on another broker), one job by id (``location: spill``), the
dashboard's job browser and job page, and stats all show every spilled dead
job once, read from its object; a job taken out of its object is shown where
it went."""

from __future__ import annotations

from pathlib import Path

from broker.model.job import DEAD, PENDING
from broker.model.ops import FailItem, Inspect, NewJob
from broker.service.broker import Broker
from broker.storage.files import FileStore
from tests.support.inprocess import run, started, stored

N = 45


async def _spilled(broker: Broker) -> tuple[list[str], list[str]]:
    """``N`` jobs made dead (spilled: two objects), then pending ones pushed
    after them; the dead ids and the pending ids."""
    dead: list[str] = []
    for batch in (20, N - 20):
        ids = await broker.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=1)
                                      for i in range(batch)])
        got = await broker.claim("q", "w", max_jobs=batch)
        assert sorted(j.id for j in got) == sorted(ids)
        await broker.fail("q", [FailItem(j.token, f"boom {j.id}", 0) for j in got])
        dead += ids
    pending = list(await broker.push("q", [b'{"p":%d}' % i for i in range(3)]))
    assert len(stored(broker.store).spill_refs) == 2
    assert not [j for j in stored(broker.store).jobs.touched() if j.status == DEAD]
    return sorted(dead), pending


async def _pages(broker: Broker, status: str | None, limit: int) -> list[dict]:  # type: ignore[type-arg]
    rows: list[dict] = []  # type: ignore[type-arg]
    after = None
    while True:
        page = await broker.jobs("q", status, limit, after)
        rows += page
        if len(page) < limit:
            return rows
        after = page[-1]["id"]


def test_pages_of_dead_jobs_show_each_spilled_job_once_in_seq_order(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        dead, pending = await _spilled(a)
        for limit in (7, 100):
            rows = await _pages(a, "dead", limit)
            assert [r["id"] for r in rows] == dead
            assert all(r["status"] == DEAD and r["last_error"] == f"boom {r['id']}"
                       for r in rows)
        everything = await _pages(a, None, 10)
        assert sorted(r["id"] for r in everything if r["status"] == DEAD) == dead
        assert [r["id"] for r in everything] == sorted(r["id"] for r in everything)
        assert {r["id"] for r in everything if r["status"] == PENDING} >= set(pending)
        assert await _pages(a, "claimed", 10) == []
        await a.stop()

    run(go())


def test_another_broker_pages_and_finds_spilled_jobs_from_the_stored_head(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        dead, _ = await _spilled(a)
        b = await started(store, "http://b")  # (does not serve q: reads the store)
        assert b.served("q") is None
        assert [r["id"] for r in await _pages(b, "dead", 6)] == dead
        got = await b.job("q", dead[5])
        assert (got["location"], got["status"], got["id"]) == ("spill", DEAD, dead[5])
        await b.stop()
        await a.stop()

    run(go())


def test_a_job_by_id_in_a_spill_object_and_after_it_was_taken_out(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        dead, _ = await _spilled(a)
        got = await a.job("q", dead[3])
        assert (got["location"], got["status"], got["attempts"]) == ("spill", DEAD, 1)
        assert got["last_error"] == f"boom {dead[3]}"
        assert await a.redrive("q", [dead[3]]) == 1
        got = await a.job("q", dead[3])
        assert (got["location"], got["status"], got["attempts"]) == ("queue", PENDING, 0)
        assert dead[3] not in [r["id"] for r in await _pages(a, "dead", 100)]
        await a.stop()

    run(go())


def test_the_dashboards_browser_and_job_page_show_spilled_jobs(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        dead, _ = await _spilled(a)
        q = a.served("q")
        assert q is not None
        page = await q.read(Inspect("page", (DEAD, None, None, 50)))
        assert [r["id"] for r in page["rows"]] == dead
        shown = await q.read(Inspect("job", ("q", dead[0])))
        assert shown["status"] == DEAD and shown["redrivable"]
        await a.stop()

    run(go())


def test_stats_count_the_spilled_jobs_from_their_refs(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        await _spilled(a)
        got = await a.stats("q")
        assert got["counts"][DEAD] == N
        assert got["total"] == N + 3
        assert got["in_spills"] == {DEAD: N, PENDING: 0}
        assert got["spill_objects"] == {DEAD: 2, PENDING: 0}
        assert await a.redrive("q") == N
        got = await a.stats("q")
        assert (got["in_spills"], got["spill_objects"]) == ({DEAD: 0, PENDING: N},
                                                            {DEAD: 0, PENDING: 2})
        await a.stop()

    run(go())


def test_redriven_jobs_show_as_pending_until_claimed(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        dead, pending = await _spilled(a)
        await a.claim("q", "w", max_jobs=3)  # (the pending ones pushed: none inline left)
        assert (await a.stats("q"))["oldest_pending_age_s"] is None
        assert await a.redrive("q") == N
        assert (await a.stats("q"))["oldest_pending_age_s"] is not None
        assert await _pages(a, "dead", 10) == []
        rows = await _pages(a, "pending", 7)
        assert [r["id"] for r in rows] == dead
        assert all(r["attempts"] == 0 for r in rows)
        taken = {j.id for j in await a.claim("q", "w", max_jobs=10)}
        rows = await _pages(a, None, 9)
        assert len(rows) == N + 3
        assert {r["id"] for r in rows if r["status"] == "claimed"} == taken | set(pending)
        await a.stop()

    run(go())
