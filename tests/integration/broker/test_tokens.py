"""Lease tokens bound to their queue (broker.model.tokens).

A token was ``j{id}.{fence}``: two new queues handed out the same one, and a
token of queue qa completed the job with that id in queue qb. Tokens now carry
a tag (a MAC under a secret kept in the queue object): these tests hold a
real broker process (file store, bearer token) to that, check the store is
byte-identical after each refused token, and follow tokens through a
takeover, a lost claim answer retried with its Idempotency-Key, an object
from before token keys, and the direct (no broker) path. Job listings show
tokens only when asked.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3

from broker import paths
from broker.http import routes
from broker.model.ops import Claim, Complete, CompleteItem, NewJob, PushPayloads
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess
from tests.support.faults import LOST_REPLY, Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, started, stored, successor

TOKEN = "bearer-for-the-token-tests"
NOT_VALID = "token is not valid for this queue"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("token-store")


@pytest.fixture(scope="module")
def broker_proc(store_dir: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(f"file://{store_dir}", "--token-env", "OSQ_TEST_TOKEN",
                       "--log-level", "debug", env={"OSQ_TEST_TOKEN": TOKEN}) as proc:
        yield proc


def qname() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def call(method: str, url: str, body: Any = None, token: str | None = TOKEN
         ) -> urllib3.BaseHTTPResponse:
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    return urllib3.request(method, url, body=None if body is None else orjson.dumps(body),
                           headers=headers, retries=False)


def claimed(proc: BrokerProcess, queue: str, n: int = 1) -> list[str]:
    """Push ``n`` jobs to a new queue ``queue`` and claim them; their tokens."""
    q = f"{proc.url}/v1/queues/{queue}"
    assert call("POST", f"{q}/push", {"jobs": [{"payload": i} for i in range(n)]}).status == 200
    got = call("POST", f"{q}/claim", {"worker": "w", "max_jobs": n, "lease_s": 600})
    assert got.status == 200
    return [j["token"] for j in got.json()["jobs"]]


def object_bytes(store_dir: Path, queue: str) -> bytes:
    return FileStore(store_dir).read(paths.state_key(queue)).data


def refused_everywhere(proc: BrokerProcess, queue: str, token: str) -> None:
    """Heartbeat, complete and fail of ``token`` on ``queue``: each a 409 whose one
    result says the token is not valid for this queue."""
    q = f"{proc.url}/v1/queues/{queue}"
    for action, body in (("heartbeat", {"tokens": [token]}),
                         ("complete", {"items": [{"token": token, "result": 1}]}),
                         ("fail", {"items": [{"token": token, "error": "x"}]})):
        r = call("POST", f"{q}/{action}", body)
        assert r.status == 409 and r.json()["code"] == "stale_token", (action, r.data)
        assert r.json()["results"] == [{"token": token, "ok": False, "reason": NOT_VALID}]


# -- over HTTP, a real broker process ---------------------------------------------


def test_two_new_queues_hand_out_different_tokens_for_their_first_job(
        broker_proc: BrokerProcess) -> None:
    [a] = claimed(broker_proc, qname())
    [b] = claimed(broker_proc, qname())
    assert a != b
    # the same job id and lease number: the tag is what tells them apart
    assert a.startswith("j0000000001.1-") and b.startswith("j0000000001.1-")


def test_a_token_of_another_queue_is_refused_and_changes_nothing(
        broker_proc: BrokerProcess, store_dir: Path) -> None:
    qa, qb = qname(), qname()
    [ta] = claimed(broker_proc, qa)
    [tb] = claimed(broker_proc, qb)
    before = object_bytes(store_dir, qb)
    refused_everywhere(broker_proc, qb, ta)
    assert object_bytes(store_dir, qb) == before
    # each queue's own token still settles its own job
    for queue, token in ((qa, ta), (qb, tb)):
        r = call("POST", f"{broker_proc.url}/v1/queues/{queue}/complete",
                 {"items": [{"token": token}]})
        assert r.status == 200 and r.json()["results"][0]["ok"]


def test_a_token_with_one_hex_digit_of_its_tag_changed_is_refused(
        broker_proc: BrokerProcess, store_dir: Path) -> None:
    queue = qname()
    [token] = claimed(broker_proc, queue)
    stored_part, sep, tag = token.rpartition("-")
    assert sep and len(tag) == 16 and int(tag, 16) >= 0
    before = object_bytes(store_dir, queue)
    for i in (0, 7, 15):
        digit = "0" if tag[i] != "0" else "f"
        refused_everywhere(broker_proc, queue, f"{stored_part}-{tag[:i]}{digit}{tag[i + 1:]}")
    refused_everywhere(broker_proc, queue, stored_part)  # the predictable part alone
    refused_everywhere(broker_proc, queue, token.upper())
    assert object_bytes(store_dir, queue) == before
    done = call("POST", f"{broker_proc.url}/v1/queues/{queue}/complete",
                {"items": [{"token": token}]})
    assert done.status == 200


def test_a_repeated_complete_with_the_same_token_answers_as_the_first(
        broker_proc: BrokerProcess) -> None:
    queue = qname()
    [token] = claimed(broker_proc, queue)
    url = f"{broker_proc.url}/v1/queues/{queue}/complete"
    first = call("POST", url, {"items": [{"token": token, "result": 1}]})
    again = call("POST", url, {"items": [{"token": token, "result": 1}]})
    assert first.status == again.status == 200 and first.json() == again.json()
    assert first.json()["results"][0] == {"token": token, "ok": True, "reason": None,
                                          "status": "completed"}


def test_jobs_listing_hides_tokens_unless_asked(broker_proc: BrokerProcess) -> None:
    """By default a lease shows its worker and times but no token; with
    tokens=true (authorised) it shows the token the claim answered, which
    completes the job. Anything but true or false is refused; without the
    bearer token the listing is refused either way."""
    queue = qname()
    [token] = claimed(broker_proc, queue)
    url = f"{broker_proc.url}/v1/queues/{queue}/jobs"
    [job] = call("GET", f"{url}?status=claimed").json()["jobs"]
    assert job["lease"]["worker"] == "w" and "expires_at" in job["lease"]
    assert "token" not in job["lease"]
    assert token not in call("GET", url).data.decode()
    [shown] = call("GET", f"{url}?status=claimed&tokens=true").json()["jobs"]
    assert shown["lease"]["token"] == token
    assert "token" not in call("GET", f"{url}?tokens=false").json()["jobs"][0]["lease"]
    bad = call("GET", f"{url}?tokens=yes")
    assert bad.status == 422 and bad.json()["code"] == "invalid_request"
    assert call("GET", f"{url}?tokens=true", token=None).status == 401
    client = QueueClient(broker_proc.url, queue, token=TOKEN)
    assert "token" not in client.jobs("claimed")[0]["lease"]
    [listed] = client.jobs("claimed", tokens=True)
    assert client.complete(listed["lease"]["token"]).ok


def test_the_token_key_appears_in_no_answer_or_log_line(broker_proc: BrokerProcess,
                                                        store_dir: Path) -> None:
    """The queue's secret is in its object and nowhere a client or an operator
    looks: stats, health, job listings (with tokens too), queue list,
    metrics, error answers, and the broker's own log (at debug level)."""
    queue = qname()
    [token] = claimed(broker_proc, queue, 2)[:1]
    key = orjson.loads(object_bytes(store_dir, queue))["token_key"]
    assert len(key) == 64
    q = f"{broker_proc.url}/v1/queues/{queue}"
    answers = [call("GET", f"{q}/stats"), call("GET", f"{broker_proc.url}/healthz"),
               call("GET", f"{q}/jobs"), call("GET", f"{q}/jobs?tokens=true"),
               call("GET", f"{broker_proc.url}/v1/queues"),
               call("GET", f"{broker_proc.url}/metrics"),
               call("POST", f"{q}/complete", {"items": [{"token": token + "0"}]}),
               call("POST", f"{q}/heartbeat", {"tokens": [token[:-1] + "x"]}),
               call("GET", f"{q}/jobs?tokens={key}")]
    assert [r.status for r in answers] == [200] * 6 + [409, 409, 422]
    for r in answers:
        text = r.data.decode()
        assert key not in text and key[:16] not in text, text[:200]
    assert key[:16] not in broker_proc.output


# -- in-process brokers: takeover, lost answers, older objects ----------------------


def test_a_token_survives_a_takeover(tmp_path: Path) -> None:
    """A token broker a handed out heartbeats and completes on broker b, which
    took the queue over after a died: the key is in the object, not a broker."""
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        a = await started(store, "http://a", clock)
        await a.push("q", [NewJob(b"1"), NewJob(b"2")])
        held = await a.claim("q", "w", 2, lease_s=600)
        await crash(a)
        b = await successor(store, clock)
        assert b.served("q") is not None
        tokens = [j.token for j in held]
        stored_tokens = {j.lease_token for j in stored(store).jobs.values()}
        assert not stored_tokens & set(tokens)  # what clients hold is not what is stored
        assert [r.ok for r in await b.heartbeat("q", tokens, 600)] == [True, True]
        answers = await b.complete("q", [CompleteItem(t, b"7") for t in tokens])
        assert [r.ok for r in answers] == [True, True]
        assert [r.token for r in answers] == tokens
        await b.stop(drain_s=5)

    run(main())
    assert sorted(r["id"] for r in archive_lines(store)) == ["j0000000001", "j0000000002"]


def test_a_claim_whose_answer_was_lost_is_replayed_with_tokens_that_complete_once(
        tmp_path: Path) -> None:
    """A keyed claim whose write landed but whose broker saw it fail (a lost
    store reply), and whose answer then never reached its client (the broker
    died), is retried with the same Idempotency-Key on the broker that took
    over: the replay hands back the same tokens, they verify there and
    complete each job once, and a repeat of that complete changes nothing."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock()
    key = ("c-lost-1", None)
    body = {"worker": "w", "max_jobs": 3, "lease_s": 600}

    async def main() -> None:
        a = await started(store, "http://a", clock)
        await a.push("q", [NewJob(b"%d" % i) for i in range(3)])
        store.inject("write_if_match", LOST_REPLY, key_contains="queue.json")
        status, first = await routes.claim(a, "q", body, key)
        assert status == 200 and len(first["jobs"]) == 3
        assert store.injected == [("write_if_match", LOST_REPLY, paths.state_key("q"))]
        await crash(a)  # the answer never left broker a
        b = await successor(inner, clock)
        status, again = await routes.claim(b, "q", body, key)
        assert status == 200
        tokens = [j["token"] for j in again["jobs"]]
        assert tokens == [j["token"] for j in first["jobs"]]
        assert not {j.lease_token for j in stored(inner).jobs.values()} & set(tokens)  # tagged
        items = {"items": [{"token": t, "result": 1} for t in tokens]}
        done = await routes.complete(b, "q", items, (None, None))
        assert done[0] == 200 and all(r["ok"] for r in done[1]["results"])
        assert await routes.complete(b, "q", items, (None, None)) == done
        assert (await b.stats("q"))["counts"]["claimed"] == 0
        await b.stop(drain_s=5)

    run(main())
    state = stored(inner)
    assert state.counters.completed == 3 and state.counters.fence == 3
    ids = [r["id"] for r in archive_lines(inner)]
    assert sorted(ids) == ["j0000000001", "j0000000002", "j0000000003"]  # each once


def test_an_object_without_a_token_key_gets_one_that_survives_a_restart(
        tmp_path: Path) -> None:
    """An object written before token keys (the field removed by hand) is served:
    its first write adds a key, and a token claimed then completes on the next
    broker, which reads the same key."""
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        a = await started(store, "http://a", clock)
        await a.push("q", [NewJob(b"1")])
        await a.stop(drain_s=5)
        raw = orjson.loads(object_bytes(tmp_path, "q"))
        del raw["token_key"]
        got = store.read(paths.state_key("q"))
        store.write_if_match(paths.state_key("q"), orjson.dumps(raw), got.etag)
        b = await started(store, "http://b", clock)
        [held] = await b.claim("q", "w", lease_s=600)
        key = orjson.loads(object_bytes(tmp_path, "q"))["token_key"]
        await b.stop(drain_s=5)
        c = await started(store, "http://c", clock)
        [answer] = await c.complete("q", [CompleteItem(held.token)])
        assert answer.ok
        assert orjson.loads(object_bytes(tmp_path, "q"))["token_key"] == key
        await c.stop(drain_s=5)

    run(main())


def test_tokens_cross_between_a_broker_and_the_direct_path(tmp_path: Path) -> None:
    """The direct path (one CAS per operation, no broker) binds the object as a
    broker does: a token either hands out completes on the other."""
    from tests.support.direct import DirectQueue

    store = FileStore(tmp_path)
    direct = DirectQueue(store, "q")
    direct.apply(PushPayloads((b"1", b"2")))
    [by_direct] = direct.apply(Claim("w", 1, 600_000)).jobs
    assert by_direct.token != stored(store).jobs[1].lease_token  # tagged

    async def main() -> str:
        a = await started(store, "http://a")
        [answer] = await a.complete("q", [CompleteItem(by_direct.token)])
        assert answer.ok
        [held] = await a.claim("q", "w", lease_s=600)
        await a.stop(drain_s=5)
        return held.token

    by_broker = run(main())
    [answer] = direct.apply(Complete((CompleteItem(by_broker),))).items
    assert answer.ok


# -- the tagger itself ----------------------------------------------------------


def test_a_tag_verifies_only_for_its_key_queue_and_token() -> None:
    from broker.model.tokens import Tagger, stored_part

    key = bytes(range(32))
    tagger = Tagger(key, "qa")
    token = tagger.tag("j0000000001.1")
    assert tagger.stored(token) == "j0000000001.1" == stored_part(token)
    assert Tagger(key, "qb").stored(token) is None
    assert Tagger(bytes(32), "qa").stored(token) is None
    assert tagger.stored(tagger.tag("j0000000001.2").replace(".2-", ".1-")) is None
    for junk in ("", "-", "j0000000001.1", "j1.1-\u00e9" * 3, token + "0", token[:-1],
                 "x" * 300, "j0000000001.1-" + "\u0661" * 16, "\ud800-" + "0" * 16):
        assert tagger.stored(junk) is None, junk


def test_no_repr_shows_the_key_and_a_bound_state_copies() -> None:
    from tests.support.states import KEY, queue_of

    state = queue_of(1, 0)
    assert state.tagger is not None
    for text in (repr(state), repr(state.tagger), str(state)):
        assert KEY.hex() not in text and "token_key" not in text
    copy = pickle.loads(pickle.dumps(state))
    assert copy.tagger is not None and copy.tagger.tag("j1.1") == state.tagger.tag("j1.1")


def test_a_malformed_token_key_is_refused_without_quoting_it() -> None:
    from broker.errors import CorruptState
    from broker.model.format import codec
    from broker.model.format.decode import decode_state
    from tests.support.states import KEY, queue_of

    data = codec.encode(queue_of(1, 0))
    for bad in (KEY.hex()[:-1] + "G", KEY.hex().upper(), KEY.hex()[:40]):
        with pytest.raises(CorruptState) as err:
            decode_state(data.replace(KEY.hex().encode(), bad.encode()))
        assert "token_key" in str(err.value) and bad not in str(err.value)
        assert bad[:16] not in str(err.value)
