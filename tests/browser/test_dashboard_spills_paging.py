"""The dashboard's job browser in a real browser (headless Chromium) against a
real broker process with ``OSQUEUE_SPILL_JOBS`` 1, over a file store: dead
jobs in more spill objects than a page step loads (one object per two jobs),
walked forwards by "Next" to the last page and back by "Previous" to the
first, each page of 5: both walks show every dead job once, in seq order, as
the store holds them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.model.state import MAX_WINDOWS
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.browser

TOKEN = "browser-test-token-5c02e8"
OBJECTS = MAX_WINDOWS + 3


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-spills-paging")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(f"file://{store_dir}", "--token-env", "OSQ_UI_TOKEN", "--lease-s",
                       "3600", env={"OSQ_UI_TOKEN": TOKEN, "OSQUEUE_SPILL_JOBS": "1"}) as proc:
        yield proc


def _ids(page: Any) -> list[str]:
    rows = page.locator("tr[data-job]")
    return [rows.nth(i).get_attribute("data-job") for i in range(rows.count())]


def test_paging_back_through_spilled_dead_jobs_shows_each_once(
        ui_page: Any, broker: BrokerProcess, store_dir: Path) -> None:
    from playwright.sync_api import expect

    client = QueueClient(broker.url, f"q-{uuid.uuid4().hex[:8]}", token=TOKEN)
    q = client.queue
    client.create(max_attempts=1)
    dead: list[str] = []
    for r in range(OBJECTS):
        client.push_many([{"r": r, "n": n} for n in range(2)])
        for job in client.claim("w", max_jobs=2):
            client.fail(job.token, "boom")
            dead.append(job.id)
    raw = orjson.loads(FileStore(str(store_dir)).get(paths.state_key(q)))
    assert len(raw["spills"]) == OBJECTS
    assert [j for j in raw["jobs"] if j["status"] == "dead"] == []

    page = ui_page
    page.goto(broker.url + f"/ui/queues/{q}?status=dead&limit=5")
    page.get_by_test_id("token").fill(TOKEN)
    page.get_by_test_id("sign-in").click()
    expect(page.locator("tr[data-job]").first).to_be_visible()
    forwards = _ids(page)
    while page.get_by_test_id("next").count():
        last = forwards[-1]
        page.get_by_test_id("next").click()
        expect(page.locator("tr[data-job]").first).not_to_have_attribute("data-job", last)
        forwards += _ids(page)
    assert forwards == sorted(dead)
    backwards = _ids(page)
    while page.get_by_test_id("prev").count():
        first = backwards[0]
        page.get_by_test_id("prev").click()
        expect(page.locator("tr[data-job]").last).not_to_have_attribute("data-job", first)
        backwards = _ids(page) + backwards
    assert backwards == sorted(dead)
