"""The queue page's Groups panel, in a real browser (headless Chromium driven by
Playwright) against a real broker process over a file store: with limits set and
jobs claimed it shows the limit settings, the jobs held back and the busiest
groups with the very numbers the stats API answers, keeps them current, and
shows a group name as text (markup in it is not markup); a queue without
groups has no panel."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.dashboard_broker import broker, fresh, sign_in, store_dir

pytestmark = pytest.mark.browser

__all__ = ["broker", "store_dir"]  # (the module fixtures, shared)

EVIL = '<script id="x">window.pwned = 1</script>'


def _limit(limit: int | None) -> str:
    return "unlimited" if limit is None else str(limit)


def _expect_panel(page: Any, groups: dict[str, Any], wait_ms: int = 5000) -> None:
    """The panel shows ``groups``, the stats API's block, row for row, within
    ``wait_ms`` (it refreshes every 5 s)."""
    from playwright.sync_api import expect

    busiest = groups["busiest"]
    shown = {
        "groups-known": str(groups["known"]),
        "groups-claimed": str(groups["claimed"]),
        "groups-held-back": str(groups["held_back"]["jobs"]),
        "groups-at-limit": str(groups["held_back"]["groups_at_limit"]),
        "groups-name": [row["group"] if row["group"] is not None else "(no group)"
                        for row in busiest],
        "groups-in-flight": [f"{row['claimed']} / {_limit(row['limit'])}" for row in busiest],
        "groups-pending": [str(row["pending"]) for row in busiest],
        "groups-state": [row["state"].replace("_", " ") for row in busiest],
    }
    for test_id, text in shown.items():
        expect(page.get_by_test_id(test_id)).to_have_text(text, timeout=wait_ms)


def test_groups_panel_shows_limits_held_back_and_busiest_as_stats_answer(
        ui_page: Any, broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    client = fresh(broker, group_limit=2, group_limits={EVIL: 1, "beta": 5},
                   group_weights={"beta": 3})
    for n in range(5):
        client.push({"n": n}, group=EVIL)
    for n in range(4):
        client.push({"n": n}, group="alpha")
    for n in range(3):
        client.push({"n": n}, group="beta")
    client.push({"n": 0})
    claimed = client.claim("w", max_jobs=20)
    # EVIL 1 (its override), alpha 2 (group_limit), beta 3, the ungrouped job 1
    assert len(claimed) == 7
    groups = client.stats()["groups"]
    assert groups["claimed"] == 7
    assert groups["held_back"] == {"jobs": 4 + 2, "groups_at_limit": 2}

    page = ui_page
    sign_in(page, broker, f"/ui/queues/{client.queue}")
    expect(page.get_by_test_id("groups-limit")).to_have_text("2")
    expect(page.get_by_test_id("groups-overrides-count")).to_have_text("2")
    overrides = page.get_by_test_id("groups-overrides")
    expect(overrides).to_contain_text(f"{EVIL} 1")
    expect(overrides).to_contain_text("beta 5")
    expect(page.get_by_test_id("groups-weights")).to_contain_text("beta 3")
    _expect_panel(page, groups)
    assert page.locator("#x").count() == 0  # (never markup)
    assert page.evaluate("window.pwned") is None

    # the panel refreshes itself: one of EVIL's jobs ends, its next is no longer held back
    evil = next(job for job in claimed if job.group == EVIL)
    client.complete(evil.token)
    after = client.stats()["groups"]
    assert after["held_back"] == {"jobs": 2, "groups_at_limit": 1}
    _expect_panel(page, after, wait_ms=20_000)
    assert page.locator("#x").count() == 0


def test_a_queue_without_groups_has_no_groups_panel(ui_page: Any, broker: BrokerProcess) -> None:
    from playwright.sync_api import expect

    client = fresh(broker)
    client.push({"n": 1})
    assert client.claim("w")
    assert "groups" not in client.stats()
    page = ui_page
    sign_in(page, broker, f"/ui/queues/{client.queue}")
    expect(page.get_by_test_id("summary-claimed")).to_have_text("1")
    expect(page.get_by_test_id("groups")).to_have_count(0)
