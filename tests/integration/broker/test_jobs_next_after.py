"""GET /v1/queues/{queue}/jobs over a deep queue (segment objects), followed by
``next_after`` alone: a page is full or the last, so a client that stops at
``next_after: null`` sees every job once, in seq order, even when a page
spans more segment objects than a broker keeps loaded at once
(``broker.model.state.MAX_WINDOWS``). Real broker processes over a file store
(the owner, and a second broker answering from the stored objects), plain
HTTP; the store is checked to be unchanged by the reads."""

from __future__ import annotations

import urllib.parse
import urllib.request
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
from tests.support.inprocess import stored

#: Jobs per segment: every push of this many goes into one segment object.
SEGMENT_JOBS = 5
#: Segments pushed; a page of LIMIT spans more of them than MAX_WINDOWS.
SEGMENTS = 4 * MAX_WINDOWS
LIMIT = 2 * MAX_WINDOWS * SEGMENT_JOBS


def _get(url: str, path: str, **query: Any) -> Any:
    qs = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
    with urllib.request.urlopen(f"{url}{path}?{qs}", timeout=30) as answer:
        return orjson.loads(answer.read())


def _follow(url: str, status: str | None) -> Iterator[list[dict[str, Any]]]:
    """Every page of queue ``q`` as an HTTP client that follows next_after sees it."""
    after = None
    while True:
        page = _get(url, "/v1/queues/q/jobs", limit=LIMIT, status=status, after=after)
        yield page["jobs"]
        after = page["next_after"]
        if after is None:
            return
        assert after == page["jobs"][-1]["id"]


@pytest.fixture()
def deep_queue(tmp_path: Path) -> Iterator[tuple[BrokerProcess, list[str]]]:
    """A queue of inline jobs between SEGMENTS one-push segment objects, a few
    of whose jobs are claimed (moved into the head); its broker; every job id."""
    # a lease of an hour: no renewal writes while the test compares the store
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", str(SEGMENT_JOBS),
                       "--lease-s", "3600") as owner:
        client = QueueClient(owner.url, "q")
        ids = client.push_many([{"inline": 0}])
        for n in range(SEGMENTS):
            ids += client.push_many([{"seg": n, "i": i} for i in range(SEGMENT_JOBS)])
            if n % 7 == 3:
                ids += client.push_many([{"inline": n}, {"inline": -n}])
        client.claim("w", max_jobs=3, lease_s=3600)
        assert len(stored(FileStore(tmp_path)).segment_refs) >= SEGMENTS - 1
        yield owner, ids


@pytest.mark.parametrize("reader", ["owner", "standby"])
def test_jobs_pages_followed_by_next_after_show_every_job_once_in_seq_order(
        tmp_path: Path, deep_queue: tuple[BrokerProcess, list[str]], reader: str) -> None:
    owner, ids = deep_queue
    store = FileStore(tmp_path)
    before = store.read(paths.state_key("q")).data
    with BrokerProcess(f"file://{tmp_path}", "--lease-s", "3600") as other:
        url = owner.url if reader == "owner" else other.url
        for status, want in ((None, ids), ("pending", ids[3:])):
            pages = list(_follow(url, status))
            seen = [job["id"] for page in pages for job in page]
            assert seen == want, status
            # full pages, then the last one (shorter, or empty after a full one)
            assert all(len(page) == LIMIT for page in pages[:-1]), [len(p) for p in pages]
            assert len(pages) == len(want) // LIMIT + 1
        assert [job["status"] for job in _get(url, "/v1/queues/q/jobs",
                                              status="claimed")["jobs"]] == ["claimed"] * 3
    assert store.read(paths.state_key("q")).data == before  # (reads write nothing)
