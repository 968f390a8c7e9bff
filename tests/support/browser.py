"""Pytest fixtures for the dashboard's browser tests: one headless Chromium for the
module of browser tests, driven by Playwright for Python.

The browser is Debian's ``chromium`` package at ``/usr/bin/chromium`` (or the
path in ``OSQ_CHROMIUM``), never Playwright's own download (which cannot work
here). ``make test`` installs it with apt when it is missing and the user is
root; when it (or the ``playwright`` package) is missing, the fixture FAILS,
naming the fix, rather than skipping. Playwright launches it with a fresh
temporary profile (user-data dir) that it removes at close; each test gets
its own browser context (cookies included).

Why one per module and not per session: while Playwright's sync API is open it
keeps an event loop running in this thread, and every later test's
``asyncio.run`` would be refused ("cannot be called from a running event
loop"). Each module of browser tests gets its own; a module may add switches
with a ``CHROMIUM_ARGS`` list (a host-resolver rule, say).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

#: Where Debian's chromium package puts the browser.
CHROMIUM = os.environ.get("OSQ_CHROMIUM", "/usr/bin/chromium")
#: Headless, and nothing that reaches out to the network on its own.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def launch(playwright: Any, *extra: str) -> Any:
    """Chromium at :data:`CHROMIUM`, headless, with :data:`ARGS` and ``extra``."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=[*ARGS, *extra],
                                      headless=True)


@pytest.fixture(scope="module")
def chromium(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The module's browser (a Playwright ``Browser``), with the module's
    ``CHROMIUM_ARGS`` if it has them."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"the dashboard's browser tests need Chromium at {CHROMIUM}: run "
                    "`make test` as root (it installs it), or `sudo apt-get install -y "
                    "chromium` (or set OSQ_CHROMIUM to a Chromium binary)", pytrace=False)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the dashboard's browser tests need Playwright for Python: "
                    "pip install -e '.[dev]'", pytrace=False)
    with sync_playwright() as playwright:
        browser = launch(playwright, *getattr(request.module, "CHROMIUM_ARGS", ()))
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture()
def ui_page(chromium: Any) -> Iterator[Any]:
    """A page in a fresh browser context (no cookies from other tests)."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    try:
        yield context.new_page()
    finally:
        context.close()


#: A module's ``CHROMIUM_ARGS`` for a DNS-rebinding page: evil.example resolves to
#: this machine (the attacker's DNS, after the page loaded), and Chromium's
#: local-network protection is off, as a browser without it would be.
REBINDING_ARGS = ["--host-resolver-rules=MAP evil.example 127.0.0.1",
                  "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests"]


def run_rebound(chromium: Any, port: int, script: str, arg: Any) -> Any:
    """What ``script`` (a JS function of ``arg``) answers, run in a page served as
    ``http://evil.example:PORT/`` (a route of the browser's: the attacker's server
    answered it) once evil.example resolves to 127.0.0.1 (:data:`REBINDING_ARGS`):
    its requests to relative URLs reach the broker on ``port``, same-origin."""
    page_url = f"http://evil.example:{port}/"
    context = chromium.new_context()
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        page.route(page_url, lambda route: route.fulfill(
            status=200, content_type="text/html", body="<!doctype html><title>hi</title>"))
        page.goto(page_url)
        return page.evaluate(script, arg)
    finally:
        context.close()
