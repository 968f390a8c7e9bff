"""The admin routes (purge, redrive, cancel, create/configure, pause, resume) against
a real broker process over a file store.

A body is validated by the route's model before anything happens: one that is
not a JSON object, names a field the route does not know, has a wrong type or
leaves out what to act on gets 422 naming the field, and the store stays
byte-identical. "Everything" is asked for only with ``{"all": true}``. Every
route reads its body within ``--max-request-mb`` (413 past it).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import urllib3

from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess

TOKEN = "admin-routes-test-token"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("admin-store")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    # a lease of an hour: the owner renews its record (a write) only after half of it,
    # so nothing but the calls under test writes the store while a test compares it
    with BrokerProcess(f"file://{store_dir}", "--token-env", "OSQ_ADMIN_TOKEN",
                       "--lease-s", "3600", "--max-request-mb", "1",
                       env={"OSQ_ADMIN_TOKEN": TOKEN}) as proc:
        yield proc


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every object under the store's root, by path: the version it links to (a new
    one each write, bytes repeated or not) and its bytes. Superseded version files
    are left out: the broker deletes them in the background after a write."""
    return {str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else "", p.read_bytes())
            for p in sorted(root.rglob("*"))
            if p.is_file() and not (p.name.startswith(".") and ".v-" in p.name)}


HTTP = urllib3.PoolManager()


def post(url: str, body: object, method: str = "POST",
         **kw: object) -> urllib3.BaseHTTPResponse:
    return HTTP.request(method, url, body=body, retries=False, headers={  # type: ignore[arg-type]
        "authorization": f"Bearer {TOKEN}", "content-type": "application/json"}, **kw)


@pytest.fixture()
def seeded(broker: BrokerProcess) -> QueueClient:
    """A queue of two pending jobs and one dead one (max_attempts 1)."""
    client = QueueClient(broker.url, f"q-{uuid.uuid4().hex[:10]}", token=TOKEN)
    client.create(max_attempts=1)
    client.push_many(["a", "b", "c"])
    client.fail(client.claim("w")[0].token, "boom")
    assert client.stats()["counts"] == {"pending": 2, "claimed": 0, "dead": 1, "completed": 0,
                                        "cancelled": 0}
    return client


REFUSED = [
    # purge: not an object, a misspelt field, nothing asked for, both asked for, bad values
    ("purge", b'["dead"]', "request body"),
    ("purge", b'{"status": ["dead"]}', "'status'"),
    ("purge", b"{}", "'statuses'"),
    ("purge", b"", "'statuses'"),
    ("purge", b"null", "request body"),
    ("purge", b'"all"', "request body"),
    ("purge", b'{"statuses": []}', "'statuses'"),
    ("purge", b'{"statuses": null}', "'statuses'"),
    ("purge", b'{"statuses": "dead"}', "'statuses'"),
    ("purge", b'{"statuses": ["completed"]}', "'statuses[0]'"),
    ("purge", b'{"statuses": ["dead"], "all": true}', "not both"),
    ("purge", b'{"all": false}', "'all'"),
    ("purge", b'{"all": "true"}', "'all'"),
    ("purge", b'{"all": 1}', "'all'"),
    ("purge", b'{"al": true}', "'al'"),
    # redrive
    ("redrive", b'["j0000000001"]', "request body"),
    ("redrive", b'{"id": ["j0000000003"]}', "'id'"),
    ("redrive", b"{}", "'ids'"),
    ("redrive", b"", "'ids'"),
    ("redrive", b'{"ids": []}', "'ids'"),
    ("redrive", b'{"ids": [3]}', "'ids[0]'"),
    ("redrive", b'{"ids": ["j0000000003"], "all": true}', "not both"),
    # cancel
    ("cancel", b'["j0000000001"]', "request body"),
    ("cancel", b"{}", "'ids'"),
    ("cancel", b"", "'ids'"),
    ("cancel", b'{"ids": []}', "'ids'"),
    ("cancel", b'{"ids": "j0000000001"}', "'ids'"),
    ("cancel", b'{"ids": [1]}', "'ids[0]'"),
    ("cancel", b'{"ids": ["j00000000000000001"]}', "'ids[0]'"),
    ("cancel", b'{"ids": ["j0000000001"], "all": true}', "'all'"),
    ("cancel", b'{"id": ["j0000000001"]}', "'ids'"),
    # pause and resume take no fields
    ("pause", b'{"paused": true}', "'paused'"),
    ("resume", b"[1]", "request body"),
    # create / configure
    ("", b'{"settings": {"max_attempt": 3}}', "'settings.max_attempt'"),
    ("", b'{"setting": {"max_attempts": 3}}', "'setting'"),
    ("", b'{"settings": {"max_attempts": "3"}}', "'settings.max_attempts'"),
    ("", b'{"settings": {"max_attempts": 0}}', "'settings.max_attempts'"),
    ("", b'{"settings": []}', "'settings'"),
    ("", b'{"settings": {"max_claims_per_s": -1}}', "'settings.max_claims_per_s'"),
    ("", b'{"settings": {"max_claims_per_s": "5"}}', "'settings.max_claims_per_s'"),
    ("", b'{"settings": {"claim_burst": 1.5}}', "'settings.claim_burst'"),
    ("", b'["max_attempts"]', "request body"),
]


@pytest.mark.parametrize(("action", "body", "named"), REFUSED)
def test_a_bad_admin_body_is_422_and_changes_nothing(seeded: QueueClient, store_dir: Path,
                                                    action: str, body: bytes,
                                                    named: str) -> None:
    url = f"{seeded.url}/v1/queues/{seeded.queue}" + (f"/{action}" if action else "")
    before = snapshot(store_dir)
    for method in ("POST", "PUT") if not action else ("POST",):
        r = post(url, body, method)
        assert r.status == 422, (method, r.data)
        error = r.json()
        assert error["code"] == "invalid_request" and named in error["error"], error
    assert snapshot(store_dir) == before
    assert seeded.stats()["counts"]["pending"] == 2 and seeded.stats()["paused"] is False


def test_purge_acts_on_what_is_asked(seeded: QueueClient) -> None:
    url = f"{seeded.url}/v1/queues/{seeded.queue}/purge"
    assert post(url, b'{"statuses": ["dead"]}').json() == {"purged": 1}
    assert seeded.stats()["counts"]["pending"] == 2
    assert post(url, b'{"all": true}').json() == {"purged": 2}
    assert seeded.stats()["total"] == 0


def test_purge_all_leaves_claimed_jobs(seeded: QueueClient) -> None:
    seeded.claim("w")
    assert seeded.purge() == 2  # the client asks with {"all": true}: pending and dead
    assert seeded.stats()["counts"]["claimed"] == 1


def test_redrive_acts_on_what_is_asked(seeded: QueueClient) -> None:
    url = f"{seeded.url}/v1/queues/{seeded.queue}/redrive"
    (dead,) = seeded.jobs(status="dead")
    assert post(url, b'{"ids": ["j0000000999"]}').json() == {"redriven": 0}
    assert post(url, orjson.dumps({"ids": [dead["id"]]})).json() == {"redriven": 1}
    seeded.fail(seeded.claim("w")[0].token, "boom again")
    assert post(url, b'{"all": true}').json() == {"redriven": 1}
    assert seeded.stats()["counts"]["pending"] == 3


def test_cancel_answers_per_id_and_changes_nothing_for_unknown_or_finished_jobs(
        seeded: QueueClient, store_dir: Path) -> None:
    url = f"{seeded.url}/v1/queues/{seeded.queue}/cancel"
    (dead,) = seeded.jobs(status="dead")
    before = snapshot(store_dir)
    r = post(url, orjson.dumps({"ids": [dead["id"], "j0000000999", "j1"]}))
    assert r.status == 200
    assert [(a["id"], a["ok"], a["status"]) for a in r.json()["results"]] == [
        (dead["id"], False, "finished"), ("j0000000999", False, "unknown"),
        ("j1", False, "unknown")]
    assert all(a["reason"] for a in r.json()["results"])
    assert snapshot(store_dir) == before
    pending, other = (j["id"] for j in seeded.jobs(status="pending"))
    [held] = seeded.claim("w")
    assert held.id == pending
    answers = seeded.cancel([held.id, other])
    assert [(a.id, a.ok, a.status) for a in answers] == [
        (held.id, True, "cancel_requested"), (other, True, "cancelled")]
    stats = seeded.stats()
    assert stats["counts"]["cancelled"] == 1 and stats["cancel_requested"] == 1
    assert stats["cancelled_total"] == 2
    [beat] = seeded.heartbeat([held.token], 30.0)
    assert (beat.ok, beat.status) == (False, "cancelled")
    [done] = seeded.complete(held.token, "too late"),
    assert (done.ok, done.status) == (False, "cancelled")
    assert seeded.stats()["completed_total"] == 0


def test_the_rate_limit_is_a_setting_shown_in_stats_and_metrics(seeded: QueueClient) -> None:
    stats = seeded.create(max_claims_per_s=0.5, claim_burst=1)
    assert stats["settings"]["max_claims_per_s"] == 0.5
    assert (stats["claim_limit_per_s"], stats["claim_burst"]) == (0.5, 1)
    assert len(seeded.claim("w", 2)) == 1 and seeded.claim("w", 2) == []  # then one a 2 s
    metrics = HTTP.request("GET", f"{seeded.url}/metrics",
                           headers={"authorization": f"Bearer {TOKEN}"}).data.decode()
    q = seeded.queue
    assert f'osqueue_claim_limit_per_s{{queue="{q}"}} 0.5' in metrics
    assert f'osqueue_claim_tokens{{queue="{q}"}} 0.0' in metrics
    assert f'osqueue_claims_per_s{{queue="{q}"}} 0.' in metrics
    assert seeded.create(max_claims_per_s=0)["claim_limit_per_s"] is None
    assert len(seeded.claim("w", 5)) == 1  # (the one pending job left)


def test_client_redrive_and_purge_refuse_an_empty_list(seeded: QueueClient) -> None:
    from broker.errors import InvalidRequest

    with pytest.raises(InvalidRequest):
        seeded.purge([])
    with pytest.raises(InvalidRequest):
        seeded.redrive([])
    assert seeded.stats()["total"] == 3


@pytest.mark.parametrize("action", ["purge", "redrive", "cancel", "", "pause"])
@pytest.mark.parametrize("chunked", [False, True])
def test_an_admin_body_past_the_limit_is_413_and_changes_nothing(
        seeded: QueueClient, store_dir: Path, action: str, chunked: bool) -> None:
    """The limit (1 MiB here) holds on every route: a declared length past it is
    refused before the body is read, a chunked body once it has grown past it."""
    url = f"{seeded.url}/v1/queues/{seeded.queue}" + (f"/{action}" if action else "")
    big = orjson.dumps({"ids": ["j1"] * (MIB // 4)})
    assert len(big) > MIB
    before = snapshot(store_dir)
    body = iter([big[i:i + 65536] for i in range(0, len(big), 65536)]) if chunked else big
    r = post(url, body, chunked=chunked)
    assert r.status == 413 and r.json()["code"] == "payload_too_large", r.data
    assert snapshot(store_dir) == before


def test_a_declared_length_past_the_limit_is_413_on_a_route_without_a_body(
        seeded: QueueClient) -> None:
    r = post(f"{seeded.url}/v1/queues/{seeded.queue}/stats", b"x" * (MIB + 1), "GET")
    assert r.status == 413 and r.json()["code"] == "payload_too_large"
