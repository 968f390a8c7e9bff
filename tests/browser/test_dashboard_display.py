"""What the dashboard shows, in a real browser: headless Chromium (Debian's
package, see tests/support/browser.py) driven by Playwright, against real broker
processes over a file store.

Text anyone can write shows its control characters escaped; only an action makes
its notice; a new queue's charts say why they are empty, and one sample gives a
time axis of seconds, not years; times are relative with the exact UTC time on
hover; the job table refreshes itself and keeps what is ticked, with a select-all;
a dead count of 0 is not red; the header names the broker by its address; the
figures name what they count (jobs processed, failed, cancelled since the queue
began) on the queue's page and in the overview's totals.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.broker_process import BROKER_ID, BrokerProcess, eventually
from tests.support.dashboard_broker import broker, fresh, sign_in, store_dir, ui_broker
from tests.support.store_files import store_files

pytestmark = pytest.mark.browser
__all__ = ["broker", "store_dir"]  # (the module fixtures, shared)

#: Default text colour and the dead count's red (dashboard.css).
PLAIN, RED = "rgb(29, 35, 48)", "rgb(176, 37, 37)"


def color(page: Any, test_id: str) -> str:
    return str(page.get_by_test_id(test_id).evaluate("e => getComputedStyle(e).color"))


def test_control_characters_show_escaped(ui_page: Any, broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    client = fresh(broker)
    q = client.queue
    client.push_many([{"payload": {"note": "paid\u202etxt.exe"}, "key": "order-\u202e\x00-7"},
                      {"payload": {"n": 2}}])
    (job,) = client.claim("worker-\u202e\x00", lease_s=600)
    client.fail(job.token, "ValueError: \x00bad\u202e byte")
    (held,) = client.claim("worker-\u202e-2", lease_s=600)
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{q}")
    row = page.locator(f'tr[data-job="{held.id}"]')
    expect(row).to_contain_text("worker-\\u202e-2")
    dead = page.locator(f'tr[data-job="{job.id}"]')
    expect(dead).to_contain_text("ValueError: \\x00bad\\u202e byte")
    expect(dead).to_contain_text('"paid\\u202etxt.exe"')
    page.locator(f'tr[data-job="{job.id}"] a').click()
    expect(page.get_by_test_id("last-error")).to_have_text("ValueError: \\x00bad\\u202e byte")
    expect(page.get_by_test_id("payload")).to_contain_text('"note": "paid\\u202etxt.exe"')
    expect(page.get_by_test_id("key")).to_have_text("order-\\u202e\\x00-7")
    for text in (page.locator("body").inner_text(), page.content()):
        assert "\u202e" not in text and "\x00" not in text


def test_only_an_action_makes_its_notice(ui_page: Any, broker: BrokerProcess,
                                         store_dir: Path) -> None:
    from playwright.sync_api import expect

    client = fresh(broker)
    client.push_many([{"n": i} for i in range(3)])
    q = client.queue
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{q}")
    before = store_files(store_dir / q)
    for query in ("did=purge&n=99999999999", "did=pause", "did=cancel&cancelled=3"):
        page.goto(f"{broker.url}/ui/queues/{q}?{query}")
        expect(page.get_by_test_id("summary-pending")).to_have_text("3")
        expect(page.get_by_test_id("done")).to_have_count(0)
    assert store_files(store_dir / q) == before
    page.get_by_test_id("pause").click()
    expect(page.get_by_test_id("done")).to_have_text(
        "Paused: no job is handed out until resumed.")
    page.reload()  # shown once
    expect(page.get_by_test_id("summary-state")).to_have_text("paused")
    expect(page.get_by_test_id("done")).to_have_count(0)


def test_a_new_queue_says_why_its_charts_are_empty(ui_page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    with ui_broker(tmp_path, "--history-interval-s", "60") as broker:
        client = fresh(broker)
        page = ui_page
        sign_in(page, broker, f"/ui/queues/{client.queue}")
        note = page.get_by_test_id("charts-empty")
        expect(note).to_be_visible()
        expect(note).to_contain_text("No samples yet: this broker samples the queue every 1 min")
        expect(page.locator("#charts")).to_have_attribute("data-points", "0")
        expect(page.locator("#charts .uplot")).to_have_count(0)  # no empty axes drawn
        expect(page.get_by_test_id("no-jobs")).to_have_text("No jobs here yet.")


def test_one_sample_gives_a_time_axis_of_seconds(ui_page: Any, broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    client = fresh(broker)
    page = ui_page
    sign_in(page, broker, "/ui/")
    at = 1_795_000_000.0
    one = {"interval_s": 0.5, "window_s": 3600.0, "t": [at], "depth": [3], "enqueued": [3],
           "completed": [0], "failed": [0], "dead": [0]}
    # the broker's history of this queue, caught at its first point
    page.route("**/history.json", lambda route: route.fulfill(
        status=200, content_type="application/json", body=orjson.dumps(one)))
    page.goto(f"{broker.url}/ui/queues/{client.queue}")
    expect(page.locator("#charts")).to_have_attribute("data-points", "1")
    expect(page.get_by_test_id("charts-empty")).to_be_hidden()
    for chart in ("#chart-flow", "#chart-depth"):
        expect(page.locator(chart)).to_have_attribute("data-x-range", re.compile(r"\S+ \S+"))
        low, high = map(float, page.locator(chart).get_attribute("data-x-range").split())
        assert low <= at <= high and high - low <= 60, (chart, low, high)


def test_times_are_relative_with_the_exact_utc_time_on_hover(
        ui_page: Any, broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    client = fresh(broker)
    (job_id,) = client.push_many([{"n": 1}])
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{client.queue}")
    created = page.locator(f'tr[data-job="{job_id}"] [data-testid="created"] time')
    expect(created).to_have_text(re.compile(r"^(just now|\d+ s ago)$"))
    expect(created).to_have_attribute(
        "title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC$"))
    expect(created).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT.*Z$"))
    page.locator(f'tr[data-job="{job_id}"] a').click()
    expect(page.get_by_test_id("created").locator("time")).to_have_text(
        re.compile(r"^(just now|\d+ s ago)$"))
    # a page left open keeps saying it right
    expect(page.get_by_test_id("created").locator("time")).to_have_text(
        re.compile(r"^([5-9]|\d\d) s ago$"), timeout=15_000)


def test_the_job_table_refreshes_itself_keeping_the_ticked_boxes(
        ui_page: Any, broker: BrokerProcess, store_dir: Path) -> None:
    from playwright.sync_api import expect

    client = fresh(broker)
    q = client.queue
    first, second = client.push_many([{"n": 1}, {"n": 2}])
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{q}")
    rows = page.locator("tr[data-job]")
    expect(rows).to_have_count(2)
    page.locator(f'tr[data-job="{first}"] input[name="ids"]').check()
    later = client.push_many([{"n": 3}, {"n": 4}])
    expect(rows).to_have_count(4, timeout=12_000)  # without a reload
    expect(page.locator(f'tr[data-job="{first}"] input[name="ids"]')).to_be_checked()
    expect(page.locator(f'tr[data-job="{second}"] input[name="ids"]')).not_to_be_checked()
    select_all = page.get_by_test_id("select-all")
    expect(select_all).to_be_visible()
    select_all.check()
    for job_id in (first, second, *later):
        expect(page.locator(f'tr[data-job="{job_id}"] input[name="ids"]')).to_be_checked()
    page.get_by_test_id("cancel-selected").click()
    expect(page.get_by_test_id("done")).to_have_text("Cancel: 4 cancelled.")
    expect(page.get_by_test_id("summary-cancelled-total")).to_have_text("4")


def test_dead_is_red_only_when_there_are_some(ui_page: Any, broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    client = fresh(broker)
    q = client.queue
    client.push_many([{"n": 1}, {"n": 2}])
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{q}")
    expect(page.get_by_test_id("summary-dead")).to_have_text("0")
    assert color(page, "summary-dead") == PLAIN
    (job,) = client.claim("w", lease_s=600)
    client.fail(job.token, "boom")
    page.reload()
    expect(page.get_by_test_id("summary-dead")).to_have_text("1")
    assert color(page, "summary-dead") == RED
    page.goto(broker.url + "/ui/")
    expect(page.get_by_test_id(f"count-{q}-dead")).to_have_text("1")
    assert color(page, f"count-{q}-dead") == RED
    assert color(page, f"count-{q}-claimed") == PLAIN


def test_the_header_names_the_broker_by_its_address(ui_page: Any,
                                                    broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    page = ui_page
    sign_in(page, broker)
    found = BROKER_ID.search(broker.output)
    assert found is not None
    header = page.get_by_test_id("broker")
    expect(header).to_have_text(broker.url.removeprefix("http://"))
    expect(header).to_have_attribute("title", f"broker {found.group(1)}")


def test_the_figures_count_jobs_processed_failed_and_cancelled_since_the_queue_began(
        ui_page: Any, broker: BrokerProcess, store_dir: Path) -> None:
    from playwright.sync_api import expect

    client = fresh(broker)
    q = client.queue
    ids = client.push_many([{"n": i} for i in range(6)])
    jobs = client.claim("w", max_jobs=3, lease_s=600)
    client.complete(jobs[0].token, {"ok": True})
    client.complete(jobs[1].token, {"ok": True})
    client.fail(jobs[2].token, "boom")
    client.cancel(ids[4:])
    # once archived, the jobs have left the queue object: the figures still count them
    eventually(lambda: not [j for j in orjson.loads((store_dir / q / "queue.json")
                                                    .read_bytes())["jobs"]
                            if j["status"] in ("completed", "cancelled")],
               15, "the finished jobs archived")
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{q}")
    expect(page.get_by_test_id("summary-processed")).to_have_text("2")
    expect(page.get_by_test_id("summary-failed")).to_have_text("1")
    expect(page.get_by_test_id("summary-cancelled-total")).to_have_text("2")
    expect(page.get_by_test_id("summary-processed-rate")).to_have_text(
        re.compile(r"^\d+(\.\d)?/s$"), timeout=12_000)
    expect(page.get_by_test_id("summary-cancelled")).to_have_count(0)  # none awaiting
    page.goto(broker.url + "/ui/")
    expect(page.get_by_test_id(f"count-{q}-processed")).to_have_text("2")
    expect(page.get_by_test_id(f"count-{q}-failed")).to_have_text("1")
    total = page.get_by_test_id("total-processed")
    expect(total).to_have_text(re.compile(r"^[\d,]+$"))
    assert int(total.inner_text().replace(",", "")) >= 2


def test_without_javascript_the_pages_and_their_notices_still_work(
        chromium: Any, broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    client = fresh(broker)
    q = client.queue
    first, _ = client.push_many([{"n": 1}, {"n": 2}])
    context = chromium.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        sign_in(page, broker, f"/ui/queues/{q}")
        expect(page.get_by_test_id("charts-need-js")).to_be_visible()
        expect(page.get_by_test_id("select-all")).to_be_hidden()  # it needs JS: not offered
        expect(page.locator(f'tr[data-job="{first}"] time').first).to_have_text(
            re.compile(r"^(just now|\d+ s ago)$"))
        page.locator(f'tr[data-job="{first}"] input[name="ids"]').check()
        page.get_by_test_id("cancel-selected").click()
        expect(page.get_by_test_id("done")).to_have_text("Cancel: 1 cancelled.")
        expect(page.get_by_test_id("summary-cancelled-total")).to_have_text("1")
    finally:
        context.close()
