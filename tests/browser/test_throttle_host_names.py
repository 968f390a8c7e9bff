"""A DNS-rebinding page cannot lock a broker's token holders out through the
wrong-token throttle (broker.http.throttle: budgets by address and host name),
in a real browser against a real broker process with a token.

A broker with a token answers every ``Host`` (it is reached by many names;
a rebinding page has no token). But a page whose host name its owner points
at 127.0.0.1 after it loaded is same-origin with the broker, so it may send
``Authorization`` headers and login forms at will: its wrong guesses counted
against the address of the browser's machine, 127.0.0.1, and once that
address was throttled, every token holder on the machine (a local Spark
session's workers, the operator's scripts) got 429 until the page stopped.
Now wrong tokens sent under a host name that is neither loopback, nor the
advertised one, nor one the right token came with, spend a budget of their
own: the page is throttled, the token holders are not.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from broker.errors import TooManyRequests
from broker.http.throttle import Guard
from tests.support.broker_process import BrokerProcess
from tests.support.browser import REBINDING_ARGS, run_rebound
from tests.support.sockets import ask, connect, read_answer
from tests.support.store_files import snapshot_dir

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = REBINDING_ARGS  # evil.example resolves to this machine
TOKEN = "rebinding-throttle-token-0123456789"

#: What the rebound page sends: wrong bearer tokens on API calls and wrong logins.
GUESSES = """
async (q) => {
  const out = [];
  for (let n = 0; n < 15; n++) {
    const r = await fetch(`/v1/queues/${q}/stats`,
                          {headers: {authorization: `Bearer guess-${n}`}});
    out.push(r.status);
    const form = new URLSearchParams({token: `guess-login-${n}`, next: "/ui/"});
    const l = await fetch("/ui/login", {method: "POST", body: form});
    out.push(l.status);
  }
  return out;
}
"""


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(f"file://{tmp_path}", "--token-env", "OSQ_REBIND_TOKEN",
                       "--lease-s", "3600", env={"OSQ_REBIND_TOKEN": TOKEN}) as proc:
        yield proc


def test_a_rebinding_page_guessing_tokens_does_not_throttle_the_token_holders(
        chromium: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    port = urlsplit(broker.url).port
    assert port is not None
    queue = f"q-{uuid.uuid4().hex[:8]}"
    pushed = ask(port, "POST", f"/v1/queues/{queue}/push", b'{"jobs": [{"payload": 1}]}',
                 token=TOKEN)
    assert pushed.status == 200, pushed
    before = snapshot_dir(tmp_path)
    statuses = run_rebound(chromium, port, GUESSES, queue)
    # the page's own guesses are throttled (wrong ones answered 401, then 429)
    assert set(statuses) <= {401, 429} and 429 in statuses, statuses
    assert snapshot_dir(tmp_path) == before
    # a token holder on the same machine is answered (before: 429 for a minute)
    for host in ("127.0.0.1", f"127.0.0.1:{port}", f"localhost:{port}"):
        with connect(port) as sock:
            sock.sendall(f"GET /v1/queues/{queue}/stats HTTP/1.1\r\nHost: {host}\r\n"
                         f"Authorization: Bearer {TOKEN}\r\n\r\n".encode())
            answer = read_answer(sock)
        assert answer.status == 200, (host, answer)


def test_guesses_under_the_brokers_names_and_under_others_are_each_throttled() -> None:
    """The other budget is the attacker's own, not a way around the throttle:
    guesses under the broker's names (loopback, advertised, vouched for by the
    right token) spend one budget, under any other name another, each throttled."""
    guard = Guard(3, advertise_url="http://broker.internal:8765", clock=lambda: 0.0)
    client = ("10.0.0.7", 50000)
    guard.vouch(b"lb.example:443")  # the right token came under this name
    for host in (b"broker.internal:8765", b"127.0.0.1", b"lb.example:443"):
        guard.check(client, host)
        guard.refused(client, "wrong", wrong=True, host=host)
    for host in (b"broker.internal:8765", b"BROKER.internal.", b"localhost", b"[::1]:80",
                 b"lb.example:443", None):
        with pytest.raises(TooManyRequests):
            guard.check(client, host)
    for n in range(3):  # another name: its own budget, whole so far
        guard.check(client, b"evil.example:8765")
        guard.refused(client, "wrong", wrong=True, host=f"evil-{n}.example".encode())
    for host in (b"evil.example:8765", b"other.example"):
        with pytest.raises(TooManyRequests):
            guard.check(client, host)
    guard.check(("10.0.0.8", 50000), b"evil.example:8765")  # another address: untouched
