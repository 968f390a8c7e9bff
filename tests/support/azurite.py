"""Pytest fixtures for the Azure store: one Azurite server per test session.

Imported by ``tests/conftest.py``. Azurite is installed by ``make test``; when it
(or node) is missing the fixture FAILS, naming the fix, rather than skipping.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.support.azuriteserver import AzuriteMissing, AzuriteServer


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[AzuriteServer]:
    """Azurite's Blob service on 127.0.0.1 (a free port), its connection string in
    ``AZURE_STORAGE_CONNECTION_STRING`` for the session (as the SDKs expect)."""
    try:
        server = AzuriteServer().start()
    except AzuriteMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    before = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = server.connection_string
    try:
        yield server
    finally:
        if before is None:
            os.environ.pop("AZURE_STORAGE_CONNECTION_STRING", None)
        else:
            os.environ["AZURE_STORAGE_CONNECTION_STRING"] = before
        server.stop()


@pytest.fixture()
def azure_container(azurite_server: AzuriteServer) -> str:
    """A fresh container on the session's Azurite server."""
    name = f"osq-{uuid.uuid4().hex[:12]}"
    azurite_server.create_container(name)
    return name


@pytest.fixture()
def azure_url(azure_container: str) -> str:
    return f"az://{azure_container}/queues"
