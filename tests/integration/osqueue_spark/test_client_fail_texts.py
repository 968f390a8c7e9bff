"""QueueClient.fail's error texts, against a real broker: a text with lone
surrogates (an exception's message naming a file whose name is not UTF-8,
as ``os.listdir`` returns it) fails the
job with the surrogates escaped, instead of making the body unencodable and the
call raise with the job left claimed; an error that is not a string is refused
before anything is sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from osqueue_spark import QueueClient, start_broker
from osqueue_spark.args import InvalidArgument


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[QueueClient]:
    with start_broker(f"file://{tmp_path}") as broker:
        client = QueueClient(broker.url, "texts")
        yield client
        client.close()


def test_a_lone_surrogate_in_a_failure_text_fails_the_job_with_it_escaped(
        client: QueueClient) -> None:
    name = b"\xff.csv".decode("utf-8", "surrogateescape")  # as os.listdir gives it
    text = str(ValueError(f"cannot parse {name}"))
    client.push({"doc": 1})
    job = client.claim("w", lease_s=600)[0]
    assert client.fail(job.token, text, 0.0).ok
    shown = client.job(job.id)
    assert shown["status"] == "pending"
    assert shown["last_error"] == text.replace("\udcff", "\\udcff")
    assert [e["error"] for e in shown["errors"]] == [shown["last_error"]]


def test_an_error_that_is_not_a_string_is_refused_and_the_job_stays_claimed(
        client: QueueClient) -> None:
    client.push({"doc": 1})
    job = client.claim("w", lease_s=600)[0]
    with pytest.raises(InvalidArgument, match=r"items\[0\]\.error must be a string, got 7"):
        client.fail(job.token, 7, 0.0)  # type: ignore[arg-type]
    assert client.stats()["counts"]["claimed"] == 1
    assert client.complete(job.token).ok
