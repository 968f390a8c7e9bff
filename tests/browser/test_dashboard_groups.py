"""A job's group on the dashboard, in a real browser (headless Chromium driven by
Playwright) against a real broker process over a file store: the job browser and
the job page show it, as text (markup in a group name is not markup) with its
invisible characters escaped; a job without a group shows none."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.dashboard_broker import broker, fresh, sign_in, store_dir

pytestmark = pytest.mark.browser

__all__ = ["broker", "store_dir"]  # (the module fixtures, shared)

GROUP = '<b id="x">t\u202e</b>&amp;'


def test_the_group_shows_in_the_browser_and_on_the_job_page_escaped(
        ui_page: Any, broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    client = fresh(broker)
    grouped = client.push({"n": 1}, group=GROUP)
    plain = client.push({"n": 2})
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{client.queue}")
    shown = '<b id="x">t\\u202e</b>&amp;'
    expect(page.locator(f'tr[data-job="{grouped}"]').get_by_test_id("group")).to_have_text(shown)
    expect(page.locator(f'tr[data-job="{plain}"]').get_by_test_id("group")).to_have_count(0)
    assert page.locator("#x").count() == 0  # (never markup)
    page.locator(f'tr[data-job="{grouped}"] a').click()
    expect(page.get_by_test_id("group")).to_have_text(shown)
    assert page.locator("#x").count() == 0
    for text in (page.locator("body").inner_text(), page.content()):
        assert "\u202e" not in text
    page.goto(f"{broker.url}/ui/queues/{client.queue}/jobs/{plain}")
    expect(page.get_by_test_id("job-status")).to_have_text("pending")
    expect(page.get_by_test_id("group")).to_have_count(0)
