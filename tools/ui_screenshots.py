"""Take the dashboard screenshots the README shows (docs/dashboard-*.png).

    .venv/bin/python tools/ui_screenshots.py [--out docs] [--seconds 40]

Starts a broker process over a file store in a temporary directory (sampling
its history every 0.5 s, so the charts fill in seconds), runs a little traffic
on three queues for ``--seconds`` (pushes, claims under a dispatch rate
limit, completes, failures that retry and some that go dead, a cancel now and
then; one queue paused), then opens the dashboard in
headless Chromium (tests/support/browser.py: Debian's package) and saves the
overview and the busiest queue's page.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from osqueue_spark import QueueClient  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.browser import launch  # noqa: E402

TOKEN = "screenshot-token"


def traffic(url: str, seconds: float) -> None:
    rng = random.Random(21)
    emails = QueueClient(url, "emails", token=TOKEN)
    emails.create(max_attempts=2, backoff_base_s=1.0, max_claims_per_s=200, claim_burst=400)
    thumbs = QueueClient(url, "thumbnails", token=TOKEN)
    reports = QueueClient(url, "reports", token=TOKEN)
    thumbs.push_many([{"image": f"s3://media/img/{i}.png", "sizes": [64, 256]}
                      for i in range(1200)])
    thumbs.pause()
    reports.push_many([{"report": "daily", "day": f"2026-11-{d:02d}"} for d in range(1, 25)])
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        burst = rng.randint(10, 80) if rng.random() < 0.7 else 0
        if burst:
            emails.push_many([{"to": f"user{n + i}@example.com", "template": "welcome"}
                              for i in range(burst)])
        n += burst
        jobs = emails.claim("mailer-1", max_jobs=rng.randint(20, 45), lease_s=60)
        done = [j for j in jobs if rng.random() < 0.85]
        failed = [j for j in jobs if j not in done]
        if done:
            emails.complete_many([(j.token, {"sent": True}) for j in done])
        if failed:
            emails.fail_many([(j.token, "SMTPRecipientsRefused: 550 mailbox unavailable", 0.5)
                              for j in failed])
        if burst and rng.random() < 0.1:  # an operator cancels a job now and then
            emails.cancel([f"j{n:010d}"])
        time.sleep(0.3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs"))
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    with tempfile.TemporaryDirectory() as store, BrokerProcess(
            f"file://{store}", "--token-env", "OSQ_SHOT_TOKEN", "--history-interval-s", "0.5",
            env={"OSQ_SHOT_TOKEN": TOKEN, **os.environ}) as broker:
        traffic(broker.url, args.seconds)
        with sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page(viewport={"width": 1200, "height": 330})
            page.goto(broker.url + "/ui/login")
            page.get_by_test_id("token").fill(TOKEN)
            page.get_by_test_id("sign-in").click()
            page.wait_for_selector('tr[data-queue="emails"]')
            page.screenshot(path=str(out / "dashboard-overview.png"))
            page.set_viewport_size({"width": 1200, "height": 1240})
            page.goto(broker.url + "/ui/queues/emails")
            page.wait_for_selector("#charts[data-ready=yes]")
            page.screenshot(path=str(out / "dashboard-queue.png"))
            browser.close()
    for name in ("dashboard-overview.png", "dashboard-queue.png"):
        print(f"wrote {out / name} ({(out / name).stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
