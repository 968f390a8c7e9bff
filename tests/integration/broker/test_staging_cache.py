"""StagedCache: bounded by bytes, oldest out first; and a publish without it."""

from __future__ import annotations

from pathlib import Path

from broker.model.checks import StagedChunk
from broker.model.ops import NewJob
from broker.service.staging import StagedCache
from osqueue_spark import QueueClient, start_broker


def chunk(*jobs: NewJob | bytes) -> StagedChunk:
    return StagedChunk(list(jobs), all(isinstance(job, bytes) for job in jobs), 0, 0)


def test_evicts_oldest_first_and_pops_once() -> None:
    cache = StagedCache(max_bytes=100)
    cache.put("a", chunk(b"1"), 40, "e1")
    cache.put("b", chunk(NewJob(b"2", 5)), 40, "e2")
    cache.put("c", chunk(b"3"), 40, "e3")  # over the bound: "a" goes
    cache.put("huge", chunk(b"4"), 101, "e4")  # bigger than the whole cache: not kept
    assert cache.pop("a") is None and cache.pop("huge") is None
    assert cache.pop("b") == (chunk(NewJob(b"2", 5)), "e2")
    assert cache.pop("b") is None
    cache.discard("c")
    assert cache.pop("c") is None


def test_staging_a_key_again_replaces_its_entry_and_its_bytes() -> None:
    cache = StagedCache(max_bytes=100)
    cache.put("a", chunk(b"1"), 60, "e1")
    cache.put("a", chunk(b"2"), 60, "e2")  # replaces: 60 bytes held, not 120
    cache.put("b", chunk(b"3"), 40, "e3")
    assert cache.pop("a") == (chunk(b"2"), "e2") and cache.pop("b") == (chunk(b"3"), "e3")


def test_publish_through_another_broker_reads_the_staging_objects(tmp_path: Path) -> None:
    """The broker that staged the chunks died; its successor publishes from storage."""
    store = f"file://{tmp_path}"
    jobs = [{"payload": {"i": i}} for i in range(5)] + [{"payload": "k", "key": "k1",
                                                          "priority": 3}]
    with start_broker(store) as first:
        assert QueueClient(first.url, "q").stage("w/a", jobs) == 6
    with start_broker(store) as second:
        c = QueueClient(second.url, "q")
        assert c.publish("w/", ["w/a"], once="write:w")["published"] == 6
        listed = c.jobs()
        assert [j["payload"] for j in listed] == [{"i": i} for i in range(5)] + ["k"]
        assert listed[-1]["key"] == "k1" and listed[-1]["priority"] == 3
