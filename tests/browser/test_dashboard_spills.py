"""The dashboard in a real browser (headless Chromium, tests/support/browser.py)
against a real broker process with ``OSQUEUE_SPILL_JOBS`` on, over a file
store: the counts (the queue's page and the list of queues) include the dead
jobs of spill objects, the job browser lists them with those left in the
queue object, a spilled one's page shows it, redriving it from there
takes it out of its object, and a purge of dead jobs drops the object; the
store is read to check what each did."""

from __future__ import annotations

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

pytestmark = pytest.mark.browser

TOKEN = "browser-test-token-9a41d7"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-spills")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(f"file://{store_dir}", "--token-env", "OSQ_UI_TOKEN", "--lease-s",
                       "3600", env={"OSQ_UI_TOKEN": TOKEN, "OSQUEUE_SPILL_JOBS": "3"}) as proc:
        yield proc


def head(store_dir: Path, queue: str) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(FileStore(str(store_dir)).get(paths.state_key(queue)))
    return data


def test_spilled_dead_jobs_are_listed_shown_redriven_and_purged(
        ui_page: Any, broker: BrokerProcess, store_dir: Path) -> None:
    from playwright.sync_api import expect

    client = QueueClient(broker.url, f"q-{uuid.uuid4().hex[:8]}", token=TOKEN)
    q = client.queue
    client.create(max_attempts=1)
    ids = client.push_many([{"doc": i} for i in range(6)])
    for job in client.claim("w", max_jobs=5):  # one at a time: 4 spill, the 5th stays
        client.fail(job.token, f"ValueError: cannot parse doc {job.payload['doc']}")
    raw = head(store_dir, q)
    assert [r["count"] for r in raw["spills"]] == [4]
    assert [j["id"] for j in raw["jobs"] if j["status"] == "dead"] == [ids[4]]

    page = ui_page
    page.goto(broker.url + f"/ui/queues/{q}")
    page.get_by_test_id("token").fill(TOKEN)
    page.get_by_test_id("sign-in").click()
    expect(page.get_by_test_id("summary-dead")).to_have_text("5")
    page.get_by_test_id("status-filter").select_option("dead")
    page.get_by_test_id("filter").click()
    rows = page.locator("tr[data-job]")
    expect(rows).to_have_count(5)
    assert [rows.nth(i).get_attribute("data-job") for i in range(5)] == ids[:5]
    rows.nth(1).get_by_role("link").click()  # (in the spill object)
    expect(page.get_by_test_id("job-status")).to_have_text("dead")
    expect(page.get_by_test_id("last-error")).to_contain_text("cannot parse doc 1")
    page.get_by_test_id("redrive-job").click()
    expect(page.get_by_test_id("done")).to_have_text("Returned 1 dead job(s) to pending.")
    expect(page.get_by_test_id("job-status")).to_have_text("pending")
    raw = head(store_dir, q)
    assert raw["spills"][0]["out"] and ids[1] in [j["id"] for j in raw["jobs"]]

    page.goto(broker.url + "/ui/")
    expect(page.get_by_test_id(f"count-{q}-dead")).to_have_text("4")
    page.goto(broker.url + f"/ui/queues/{q}?status=dead")
    expect(page.locator("tr[data-job]")).to_have_count(4)
    page.get_by_test_id("purge-dead").click()
    page.get_by_test_id("confirm-purge").click()
    expect(page.get_by_test_id("done")).to_have_text("Purged 4 job(s).")
    expect(page.get_by_test_id("summary-dead")).to_have_text("0")
    assert head(store_dir, q)["spills"] == []
    eventually(lambda: not FileStore(str(store_dir)).list(paths.spills_prefix(q)), 10,
               "the purged spill object deleted")
