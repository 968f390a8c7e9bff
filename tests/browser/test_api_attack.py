"""Web pages attack a broker without a token (the README's quickstart set-up) from a
real browser: headless Chromium (tests/support/browser.py) driven by Playwright,
against a real broker process on a file store, with a real queue.

* Another origin's page (a real HTTP server on another loopback port, opened as
  ``http://localhost:PORT``, another site, and as ``http://127.0.0.1:PORT``,
  the same site on another port) fires what a page can send without the
  broker's consent: ``no-cors`` fetches (push, purge, pause, a settings change,
  a claim; with a string body, a JSON-typed blob, none), a beacon, form posts
  (``text/plain`` shaped as JSON, urlencoded), and preflighted ``cors``
  fetches. Every request that reaches the broker is answered 403; none of
  the preflighted ones is sent; the page reads no answer.
* A DNS-rebinding page: served as ``http://evil.example:BROKER_PORT/`` (a
  route of the browser's) while Chromium resolves evil.example to 127.0.0.1,
  it is same-origin with the broker and reads every answer: reads of jobs
  with their lease tokens, health, metrics, queues and the OpenAPI document,
  and a purge with the JSON content type, are each answered 403 with nothing
  of the queue.

After each attack the store (every object's bytes and etag) is byte-identical.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess
from tests.support.browser import REBINDING_ARGS, run_rebound
from tests.support.store_files import snapshot_dir

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = REBINDING_ARGS  # evil.example resolves to this machine
PAYLOAD = "victim-payload-0c9e"

#: What another origin's page fires at the broker; ``{Q}`` is the queue's API URL.
#: Each records how its request ended: an opaque answer (sent, unread) or an error.
ATTACK = """
async (Q) => {
  const out = {};
  const send = async (name, url, init) => {
    try { const r = await fetch(url, init); out[name] = `${r.type}:${r.status}`; }
    catch (e) { out[name] = `error:${e.name}`; }
  };
  const nocors = (body) => ({method: "POST", mode: "no-cors", body});
  await send("push", `${Q}/push`, nocors('{"jobs": [{"payload": "evil"}]}'));
  await send("purge", `${Q}/purge`, nocors('{"all": true}'));
  await send("purge-blob", `${Q}/purge`,
             nocors(new Blob(['{"all": true}'], {type: "application/json"})));
  await send("pause", `${Q}/pause`, {method: "POST", mode: "no-cors"});
  await send("pause-body", `${Q}/pause`, nocors("{}"));
  await send("settings", Q, nocors('{"settings": {"max_attempts": 1}}'));
  await send("claim", `${Q}/claim`, nocors('{"worker": "evil", "max_jobs": 100}'));
  const form = new FormData();
  form.append("all", "true");
  await send("purge-multipart", `${Q}/purge`, nocors(form));
  // preflighted: the broker grants no preflight, so none of these is sent
  await send("cors-put", Q, {method: "PUT", headers: {"content-type": "application/json"},
                             body: '{"settings": {"max_attempts": 1}}'});
  await send("cors-purge", `${Q}/purge`, {method: "POST", body: '{"all": true}',
                                          headers: {"content-type": "application/json"}});
  await send("cors-read", `${Q}/jobs?tokens=true`, {});
  out["beacon"] = navigator.sendBeacon(`${Q}/purge`, '{"all": true}');
  const post = (action, enctype, fields) => new Promise((resolve) => {
    const frame = document.createElement("iframe");
    frame.name = `f${Math.random()}`;
    frame.onload = () => resolve(true);
    document.body.appendChild(frame);
    const f = document.createElement("form");
    f.method = "POST"; f.action = action; f.enctype = enctype; f.target = frame.name;
    for (const [name, value] of fields) {
      const input = document.createElement("input");
      input.name = name; input.value = value; f.appendChild(input);
    }
    document.body.appendChild(f);
    f.submit();
  });
  out["form-purge"] = await post(`${Q}/purge`, "text/plain", [['{"all": true, "x": "', '"}']]);
  out["form-push"] = await post(`${Q}/push`, "text/plain",
                                [['{"jobs": [{"payload": "evil"}], "x": "', '"}']]);
  out["form-pause"] = await post(`${Q}/pause`, "application/x-www-form-urlencoded", []);
  return out;
}
"""

#: What a rebinding page (same origin as the broker, by its own name) reads and sends.
REBOUND = """
async (q) => {
  const out = {};
  const send = async (name, url, init) => {
    try { const r = await fetch(url, init); out[name] = [r.status, await r.text()]; }
    catch (e) { out[name] = [0, `error:${e.name}`]; }
  };
  await send("jobs", `/v1/queues/${q}/jobs?tokens=true`, {});
  await send("stats", `/v1/queues/${q}/stats`, {});
  await send("queues", "/v1/queues", {});
  await send("healthz", "/healthz", {});
  await send("metrics", "/metrics", {});
  await send("openapi", "/openapi.json", {});
  const json = {"content-type": "application/json"};
  await send("purge", `/v1/queues/${q}/purge`,
             {method: "POST", headers: json, body: '{"all": true}'});
  await send("push", `/v1/queues/${q}/push`,
             {method: "POST", headers: json, body: '{"jobs": [{"payload": "evil"}]}'});
  await send("pause", `/v1/queues/${q}/pause`, {method: "POST", headers: json, body: "{}"});
  await send("settings", `/v1/queues/${q}`,
             {method: "PUT", headers: json, body: '{"settings": {"max_attempts": 1}}'});
  return out;
}
"""


class _AttackerPages(BaseHTTPRequestHandler):
    """Serves an empty page at every path: the attack runs in it."""

    def do_GET(self) -> None:  # (http.server calls it by that name)
        body = b"<!doctype html><title>cute cats</title><body></body>"
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def attacker() -> Iterator[int]:
    """The port of the attacker's web server on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AttackerPages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("attack-store")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    # no token (the quickstart's broker); a lease of an hour: no renewal writes
    # while a test compares the store
    with BrokerProcess(f"file://{store_dir}", "--lease-s", "3600") as proc:
        yield proc


def victim(broker: BrokerProcess) -> QueueClient:
    """A fresh queue of three jobs, one of them claimed for an hour (a lease token
    to steal)."""
    client = QueueClient(broker.url, f"victim-{uuid.uuid4().hex[:8]}")
    client.push_many([{"p": PAYLOAD, "n": n} for n in range(3)])
    assert len(client.claim("worker", max_jobs=1, lease_s=3600)) == 1
    return client


@pytest.mark.parametrize("origin", ["http://localhost:{port}", "http://127.0.0.1:{port}"],
                         ids=["cross-site", "same-site"])
def test_another_origins_page_cannot_push_purge_pause_or_change_settings(
        chromium: Any, broker: BrokerProcess, store_dir: Path, attacker: int,
        origin: str) -> None:
    client = victim(broker)
    before = snapshot_dir(store_dir)
    context = chromium.new_context()
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        answers: list[tuple[str, str, int]] = []
        page.on("response", lambda r: answers.append((r.request.method, r.url, r.status))
                if r.url.startswith(broker.url) else None)
        page.goto(origin.format(port=attacker) + "/cats.html")
        out = page.evaluate(ATTACK, f"{broker.url}/v1/queues/{client.queue}")
        page.wait_for_load_state("networkidle")
    finally:
        context.close()
    # the no-cors requests were sent (their answers opaque to the page); the
    # preflighted ones were not, and nothing could be read
    for name in ("push", "purge", "purge-blob", "pause", "pause-body", "settings", "claim",
                 "purge-multipart"):
        assert out[name] == "opaque:0", (name, out)
    assert {out["cors-put"], out["cors-purge"], out["cors-read"]} == {"error:TypeError"}, out
    assert out["beacon"] is True and out["form-purge"] is True, out
    sent = [(method, urlsplit(url).path) for method, url, _ in answers]
    q = f"/v1/queues/{client.queue}"
    # eight no-cors fetches, the beacon and three forms reached the broker, each refused
    assert sorted(sent) == sorted([("POST", f"{q}/push")] * 2 + [("POST", f"{q}/purge")] * 5
                                  + [("POST", f"{q}/pause")] * 3 + [("POST", q),
                                                                    ("POST", f"{q}/claim")]), sent
    assert [status for _, _, status in answers] == [403] * len(answers), answers
    assert snapshot_dir(store_dir) == before
    stats = client.stats()
    assert stats["paused"] is False and stats["counts"]["pending"] == 2, stats


def test_a_dns_rebinding_page_reads_nothing_and_changes_nothing(
        chromium: Any, broker: BrokerProcess, store_dir: Path) -> None:
    client = victim(broker)
    token = client.jobs(status="claimed", tokens=True)[0]["lease"]["token"]
    before = snapshot_dir(store_dir)
    port = urlsplit(broker.url).port
    out = run_rebound(chromium, port, REBOUND, client.queue)
    assert set(out) == {"jobs", "stats", "queues", "healthz", "metrics", "openapi", "purge",
                        "push", "pause", "settings"}
    for name, (status, text) in out.items():
        assert status == 403, (name, status, text[:300])
        assert orjson.loads(text)["code"] == "forbidden", (name, text)
        for secret in (PAYLOAD, token, client.queue, broker.url):
            assert secret not in text, (name, secret, text)
    assert snapshot_dir(store_dir) == before
    counts = client.stats()["counts"]
    assert counts["pending"] == 2 and counts["claimed"] == 1, counts
