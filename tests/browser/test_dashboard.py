"""The dashboard in a real browser: headless Chromium (Debian's package, see
tests/support/browser.py) driven by Playwright, against a real broker process over a
file store, with a real queue.

A person signs in (and is refused with a wrong token), sees the counts, opens a dead
job, redrives it and sees the counts change, redrives selected jobs, purges after a
confirmation, pauses and resumes, cancels a pending job and a claimed one (whose
worker, told at its next heartbeat, ends it cancelled); the store is read to check
what each did, and the broker's log names who asked. A read-only dashboard shows no
action, and refuses every one a POST sends it (the store unchanged).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.store_files import store_files

pytestmark = pytest.mark.browser

TOKEN = "browser-test-token-5f0c2a"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-store")


def _broker(store_dir: Path, *args: str) -> BrokerProcess:
    # a lease of an hour: no renewal writes while a test compares the store
    return BrokerProcess(f"file://{store_dir}", "--token-env", "OSQ_UI_TOKEN",
                         "--lease-s", "3600", "--history-interval-s", "0.5",
                         "--log-level", "info", *args, env={"OSQ_UI_TOKEN": TOKEN})


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    with _broker(store_dir) as proc:
        yield proc


def seeded(broker: BrokerProcess, pending: int = 3, dead: int = 2) -> QueueClient:
    """A fresh queue of ``pending`` pending jobs and ``dead`` dead ones."""
    client = QueueClient(broker.url, f"q-{uuid.uuid4().hex[:8]}", token=TOKEN)
    client.create(max_attempts=1)
    client.push_many([{"doc": i, "path": f"s3://bucket/docs/{i}.json"}
                      for i in range(pending + dead)])
    for job in client.claim("ui-test-worker", max_jobs=dead) if dead else []:
        client.fail(job.token, f"ValueError: cannot parse doc {job.payload['doc']}")
    return client


def stored(store_dir: Path, queue: str) -> dict[str, Any]:
    """The queue object as the store holds it."""
    data: dict[str, Any] = orjson.loads(FileStore(str(store_dir)).get(paths.state_key(queue)))
    return data


def statuses(store_dir: Path, queue: str) -> dict[str, str]:
    return {job["id"]: job["status"] for job in stored(store_dir, queue)["jobs"]}


def sign_in(page: Any, broker: BrokerProcess, path: str = "/ui/") -> None:
    page.goto(broker.url + path)
    page.get_by_test_id("token").fill(TOKEN)
    page.get_by_test_id("sign-in").click()


def count(page: Any, test_id: str) -> int:
    return int(page.get_by_test_id(test_id).inner_text().replace(",", ""))


def test_sign_in_is_refused_with_a_wrong_token_and_the_right_one_shows_the_queues(
        ui_page: Any, broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    client = seeded(broker)
    page = ui_page
    page.goto(broker.url + "/ui/")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=/ui/$"))
    page.get_by_test_id("token").fill("not-the-token")
    with page.expect_response(re.compile(r"/ui/login$")) as answer:
        page.get_by_test_id("sign-in").click()
    assert answer.value.status == 401
    expect(page.get_by_test_id("login-error")).to_contain_text("Wrong token")
    assert page.context.cookies() == []
    page.get_by_test_id("token").fill(TOKEN)
    page.get_by_test_id("sign-in").click()
    expect(page).to_have_url(re.compile(r"/ui/$"))
    expect(page.locator(f'tr[data-queue="{client.queue}"]')).to_be_visible()
    (cookie,) = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert TOKEN not in cookie["value"]
    assert "refused login" in broker.output and TOKEN not in broker.output


def test_the_counts_show_and_follow_the_queue(ui_page: Any, broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    client = seeded(broker, pending=3, dead=2)
    page = ui_page
    sign_in(page, broker)
    q = client.queue
    expect(page.get_by_test_id(f"count-{q}-pending")).to_have_text("3")
    expect(page.get_by_test_id(f"count-{q}-dead")).to_have_text("2")
    expect(page.get_by_test_id(f"state-{q}")).to_have_text("running")
    page.get_by_role("link", name=q, exact=True).click()
    expect(page.get_by_test_id("summary-pending")).to_have_text("3")
    expect(page.get_by_test_id("summary-dead")).to_have_text("2")
    expect(page.locator("#charts")).to_have_attribute("data-ready", "yes")
    client.push_many([{"late": i} for i in range(4)])  # the summary refreshes itself
    expect(page.get_by_test_id("summary-pending")).to_have_text("7", timeout=12_000)


def test_a_dead_job_redriven_from_its_page_is_pending_again(
        ui_page: Any, broker: BrokerProcess, store_dir: Path) -> None:
    from playwright.sync_api import expect

    client = seeded(broker, pending=1, dead=2)
    q = client.queue
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{q}")
    page.get_by_test_id("status-filter").select_option("dead")
    page.get_by_test_id("filter").click()
    rows = page.locator("tr[data-job]")
    expect(rows).to_have_count(2)
    job_id = rows.first.get_attribute("data-job")
    rows.first.get_by_role("link").click()
    expect(page.get_by_test_id("job-status")).to_have_text("dead")
    expect(page.get_by_test_id("last-error")).to_contain_text("cannot parse doc")
    expect(page.get_by_test_id("payload")).to_contain_text('"path": "s3://bucket/docs/')
    page.get_by_test_id("redrive-job").click()
    expect(page.get_by_test_id("done")).to_have_text("Returned 1 dead job(s) to pending.")
    expect(page.get_by_test_id("job-status")).to_have_text("pending")
    assert statuses(store_dir, q)[job_id] == "pending"
    page.get_by_role("link", name=q, exact=True).click()
    expect(page.get_by_test_id("summary-dead")).to_have_text("1")
    expect(page.get_by_test_id("summary-pending")).to_have_text("2")
    eventually(lambda: re.search(rf"ui action redrive queue={q} ids={job_id} redriven=1 "
                                 r"by=127\.0\.0\.1:\d+ \(token holder, session s-[0-9a-f]{8}\)",
                                 broker.output), 10, "the action's log line")


def test_selected_dead_jobs_are_redriven_and_a_purge_waits_for_its_confirmation(
        ui_page: Any, broker: BrokerProcess, store_dir: Path) -> None:
    from playwright.sync_api import expect

    client = seeded(broker, pending=2, dead=3)
    q = client.queue
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{q}?status=dead")
    boxes = page.locator('input[name="ids"]')
    expect(boxes).to_have_count(3)
    boxes.nth(0).check()
    boxes.nth(2).check()
    page.get_by_test_id("redrive-selected").click()
    expect(page.get_by_test_id("done")).to_have_text("Returned 2 dead job(s) to pending.")
    expect(page.locator("tr[data-job]")).to_have_count(1)  # still filtered on dead
    assert sorted(statuses(store_dir, q).values()) == ["dead"] + ["pending"] * 4

    page.get_by_test_id("purge-dead").click()
    expect(page.get_by_test_id("purge-question")).to_contain_text("(now 1)")
    assert "dead" in statuses(store_dir, q).values()  # nothing yet
    page.get_by_test_id("confirm-purge").click()
    expect(page.get_by_test_id("done")).to_have_text("Purged 1 job(s).")
    expect(page.get_by_test_id("summary-dead")).to_have_text("0")
    assert sorted(statuses(store_dir, q).values()) == ["pending"] * 4
    eventually(lambda: f"ui action purge queue={q} statuses=dead purged=1 by=" in
               broker.output, 10, "the purge's log line")


def test_pause_stops_claims_and_resume_starts_them_again(
        ui_page: Any, broker: BrokerProcess, store_dir: Path) -> None:
    from playwright.sync_api import expect

    client = seeded(broker, pending=2, dead=0)
    q = client.queue
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{q}")
    page.get_by_test_id("pause").click()
    expect(page.get_by_test_id("summary-state")).to_have_text("paused")
    assert stored(store_dir, q)["paused"] is True
    assert client.claim("w") == []
    page.get_by_test_id("resume").click()
    expect(page.get_by_test_id("summary-state")).to_have_text("running")
    assert stored(store_dir, q)["paused"] is False
    assert len(client.claim("w")) == 1
    page.goto(broker.url + "/ui/")
    expect(page.get_by_test_id(f"state-{q}")).to_have_text("running")


def archived(store_dir: Path, queue: str) -> dict[str, str]:
    """Job id -> status of every line of the queue's archive objects."""
    return {line["id"]: line["status"]
            for path in sorted((store_dir / queue / "archive").rglob("*.jsonl"))
            for line in map(orjson.loads, path.read_bytes().splitlines())}


def test_a_pending_and_a_claimed_job_cancelled_from_the_dashboard_end_cancelled(
        ui_page: Any, broker: BrokerProcess, store_dir: Path) -> None:
    from playwright.sync_api import expect

    client = seeded(broker, pending=3, dead=0)
    q = client.queue
    (held,) = client.claim("ui-test-worker", lease_s=600)
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{q}")
    expect(page.get_by_test_id("summary-pending")).to_have_text("2")
    expect(page.get_by_test_id("summary-claimed")).to_have_text("1")
    expect(page.get_by_test_id("summary-cancelled-total")).to_have_text("0")
    pending = [r for r in page.locator("tr[data-job]").evaluate_all(
        "rows => rows.map(r => r.dataset.job)") if r != held.id]
    assert len(pending) == 2

    # a pending job, from the job browser: cancelled at once
    page.locator(f'tr[data-job="{pending[0]}"] input[name="ids"]').check()
    page.get_by_test_id("cancel-selected").click()
    expect(page.get_by_test_id("done")).to_have_text("Cancel: 1 cancelled.")
    expect(page.get_by_test_id("summary-pending")).to_have_text("1")
    expect(page.get_by_test_id("summary-cancelled-total")).to_have_text("1")
    assert statuses(store_dir, q).get(pending[0], "cancelled") == "cancelled"
    eventually(lambda: archived(store_dir, q).get(pending[0]) == "cancelled", 10,
               "the cancelled job's archive line")

    # the claimed job, from its page: marked, until its worker calls
    page.locator(f'tr[data-job="{held.id}"] a').click()
    expect(page.get_by_test_id("job-status")).to_have_text("claimed")
    page.get_by_test_id("cancel-job").click()
    expect(page.get_by_test_id("done")).to_contain_text("Cancel: 1 cancel requested (claimed")
    expect(page.get_by_test_id("job-status")).to_have_text("claimed")
    expect(page.get_by_test_id("job-cancel-requested")).to_be_visible()
    expect(page.get_by_test_id("cancel-job")).to_have_count(0)
    head = stored(store_dir, q)
    (line,) = [j for j in head["jobs"] if j["id"] == held.id]
    assert line["status"] == "claimed" and "cancel_requested_at" not in line
    (record,) = [r for r in head["claims"] if r["fence"] == line["claim"]]
    assert len(record["cancel"]) == 1  # (the mark is its claim record's: format 5)
    page.get_by_role("link", name=q, exact=True).click()
    expect(page.get_by_test_id("summary-cancel-requested")).to_have_text("1 cancel requested")
    expect(page.get_by_test_id("summary-cancelled-total")).to_have_text("2")

    (beat,) = client.heartbeat([held.token], lease_s=600)
    assert not beat.ok and beat.status == "cancelled"
    done = client.complete(held.token, {"sent": True})
    assert not done.ok and done.status == "cancelled"
    page.reload()
    expect(page.get_by_test_id("summary-claimed")).to_have_text("0")
    expect(page.get_by_test_id("summary-cancel-requested")).to_have_count(0)
    expect(page.get_by_test_id("summary-pending")).to_have_text("1")
    eventually(lambda: archived(store_dir, q) == {pending[0]: "cancelled",
                                                  held.id: "cancelled"}, 10,
               "both jobs archived as cancelled, once")
    assert held.id not in statuses(store_dir, q) or \
        statuses(store_dir, q)[held.id] == "cancelled"
    eventually(lambda: re.search(rf"ui action cancel queue={q} ids={held.id} cancelled=0 "
                                 r"cancel_requested=1 finished=0 unknown=0 retry=0 "
                                 r"by=127\.0\.0\.1:\d+ \(token holder, session s-[0-9a-f]{8}\)",
                                 broker.output), 10, "the cancel's log line")
    assert f"ui action cancel queue={q} ids={pending[0]} cancelled=1 " in broker.output


def test_a_read_only_dashboard_shows_no_action_and_refuses_every_one(
        ui_page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    with _broker(tmp_path, "--ui-read-only") as broker:
        client = seeded(broker, pending=2, dead=1)
        q = client.queue
        page = ui_page
        sign_in(page, broker, f"/ui/queues/{q}?status=dead")
        expect(page.get_by_test_id("read-only")).to_be_visible()
        expect(page.get_by_test_id("summary-dead")).to_have_text("1")
        for hidden in ("actions", "pause", "resume", "redrive-all", "redrive-selected",
                       "purge-dead"):
            expect(page.get_by_test_id(hidden)).to_have_count(0)
        expect(page.locator('input[name="ids"]')).to_have_count(0)
        page.locator("tr[data-job] a").first.click()
        expect(page.get_by_test_id("job-status")).to_have_text("dead")
        expect(page.get_by_test_id("redrive-job")).to_have_count(0)
        page.goto(f"{broker.url}/ui/queues/{q}")  # pending jobs: nothing to cancel them with
        expect(page.locator("tr[data-job]")).to_have_count(3)
        expect(page.get_by_test_id("cancel-selected")).to_have_count(0)
        expect(page.locator('input[name="ids"]')).to_have_count(0)
        page.locator('tr[data-job="j0000000002"] a').click()
        expect(page.get_by_test_id("job-status")).to_have_text("pending")
        expect(page.get_by_test_id("cancel-job")).to_have_count(0)
        csrf = page.locator('input[name="csrf"]').first.get_attribute("value")
        before = store_files(tmp_path)
        for action, form in [("pause", {}), ("resume", {}), ("redrive", {"all": "yes"}),
                             ("redrive", {"ids": "j0000000001"}),
                             ("purge", {"status": "dead", "confirm": "yes"}),
                             ("cancel", {"ids": "j0000000002"})]:
            answer = page.request.post(f"{broker.url}/ui/queues/{q}/{action}",
                                       form={"csrf": csrf, **form},
                                       headers={"origin": broker.url}, max_redirects=0)
            assert answer.status == 403, (action, answer.status)
            assert "read-only" in answer.text()
        assert store_files(tmp_path) == before
        assert "ui action" not in broker.output
