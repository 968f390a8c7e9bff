"""One broker process for a module of dashboard tests in a real browser: a file
store in a module-scoped directory, the token :data:`TOKEN`, a lease of an hour
(no renewal writes while a test compares the store) and history samples every
0.5 s; :func:`fresh` makes a queue of its own for each test, :func:`sign_in`
signs a Playwright page in. A test module imports the fixtures ``store_dir`` and
``broker`` by name."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess

TOKEN = "browser-display-token-7d21"


def ui_broker(store_dir: Path, *args: str) -> BrokerProcess:
    # a lease of an hour: no renewal writes while a test compares the store
    return BrokerProcess(f"file://{store_dir}", "--token-env", "OSQ_UI_TOKEN",
                         "--lease-s", "3600", "--log-level", "info", *args,
                         env={"OSQ_UI_TOKEN": TOKEN})


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-display-store")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    with ui_broker(store_dir, "--history-interval-s", "0.5") as proc:
        yield proc


def fresh(broker: BrokerProcess, **settings: Any) -> QueueClient:
    client = QueueClient(broker.url, f"q-{uuid.uuid4().hex[:8]}", token=TOKEN)
    client.create(max_attempts=1, **settings)
    return client


def sign_in(page: Any, broker: BrokerProcess, path: str = "/ui/") -> None:
    page.goto(broker.url + path)
    page.get_by_test_id("token").fill(TOKEN)
    page.get_by_test_id("sign-in").click()
