"""Fuzzing the HTTP API of a real broker process over real sockets.

Every route of :data:`broker.http.routes.ROUTES` (a new route is fuzzed without a
change here) gets hypothesis-generated requests: ``{queue}`` valid or not, with the
token, without it or a wrong one, random headers and content types, and bodies
from the route's request model near and past every bound, of the wrong type,
with unknown fields, not objects, not JSON, staged lines, or past the size
limit; then paths and methods no route serves. Each answer is judged by
:meth:`tests.support.fuzz_harness.Harness.check`: no 5xx, every error in the one
JSON format, a request that must be refused is refused, a refused request
changes no byte of the store, and no answer (nor any log line)
holds the token or the store credentials.

One broker for the module (file store in a temporary directory, a 1 MiB request
limit, a bearer token, fake AWS credentials in its environment), kept from writing
on its own (see "Quiet store" in :mod:`tests.support.fuzz_harness`). Examples are
derandomized (and seeded per route), so every run sends the same requests; each
test checks that it sent its share (:data:`PER_ROUTE`, :data:`STRAY`: fewer in
``make test``'s short variant than in ``make long``'s, the same checks) and that
no log line of the broker holds a secret, so each stands alone, in any order.
"""

from __future__ import annotations

import secrets
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from broker.http.route import Route
from broker.http.routes import ROUTES
from tests.support.broker_process import BROKER_ID, BrokerProcess
from tests.support.fuzz_harness import Harness, windows
from tests.support.fuzz_requests import (
    FRESH,
    MAX_REQUEST_MB,
    SEEDED,
    route_requests,
    stray_requests,
)
from tests.support.tiers import short_and_long

#: Examples (requests) a route's test sends: ``make test`` runs the short variant,
#: ``make long`` the long one, with the same checks (tests/support/tiers.py).
PER_ROUTE = {"short": 40, "long": 100}
#: The same for the paths and methods no route serves.
STRAY = {"short": 100, "long": 250}
FUZZ = settings(deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=list(HealthCheck))

TOKEN = secrets.token_hex(20)
#: Credential-looking values in the broker's environment (the file store uses none;
#: nothing may echo them all the same).
FAKE_KEY_ID = "AKIA" + secrets.token_hex(8).upper()
FAKE_SECRET = secrets.token_urlsafe(30)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    base = tmp_path_factory.mktemp("fuzz")
    root, outside = base / "store", base / "outside"
    for name in ("x/fz-a/staging/w1.jsonl", "fz-a/staging/w1.jsonl", "fz-a/queue.json"):
        (outside / name).parent.mkdir(parents=True, exist_ok=True)
        (outside / name).write_bytes(b'\t{"canary": 1}\n')  # what a traversal would find
    root.mkdir()
    # --lease-s 3600: the broker renews its record after 20 minutes, not during the run;
    # --wrong-tokens-per-min 0: a wrong token is answered 401 every time, not 429
    proc = BrokerProcess(f"file://{root}", "--token-env", "OSQ_FUZZ_TOKEN", "--max-request-mb",
                         str(MAX_REQUEST_MB), "--lease-s", "3600", "--log-level", "info",
                         "--wrong-tokens-per-min", "0",
                         env={"OSQ_FUZZ_TOKEN": TOKEN, "AWS_ACCESS_KEY_ID": FAKE_KEY_ID,
                              "AWS_SECRET_ACCESS_KEY": FAKE_SECRET})
    with proc:
        yield proc, base


@pytest.fixture(scope="module")
def harness(broker: tuple[BrokerProcess, Path]) -> Harness:
    proc, base = broker
    m = BROKER_ID.search(proc.output)
    assert m is not None
    h = Harness(proc.url, base / "store", [TOKEN, FAKE_KEY_ID, FAKE_SECRET], [base / "outside"],
                private=[*SEEDED, *FRESH, m.group(1)])
    for queue in SEEDED:
        h.call("PUT", f"/v1/queues/{queue}", {})
        h.seed(queue)
    return h


def route_id(route: Route) -> str:
    return f"{route.method} {route.path}"


@pytest.mark.parametrize("route", ROUTES, ids=route_id)
@short_and_long("examples", PER_ROUTE["short"], PER_ROUTE["long"])
def test_route_answers_hold_the_invariants(broker: tuple[BrokerProcess, Path],
                                           harness: Harness, route: Route,
                                           examples: int) -> None:
    # a seed of its own for each route (derandomize alone gives every route the
    # same choices, this function being the same); still the same on every run
    @seed(zlib.crc32(route_id(route).encode()))
    @settings(FUZZ, max_examples=examples)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        req = data.draw(route_requests(route), label="request")
        problems = harness.check(req)
        assert not problems, "\n".join(problems)

    before, began = harness.sent, time.monotonic()
    run()
    # all its examples: hypothesis would stop short of max_examples on a route with
    # too few distinct requests, or filtering them away
    assert_sent(broker[0], harness, before, began, examples)


@short_and_long("examples", STRAY["short"], STRAY["long"])
def test_stray_paths_and_methods_are_refused_in_json(broker: tuple[BrokerProcess, Path],
                                                     harness: Harness, examples: int) -> None:
    @settings(FUZZ, max_examples=examples)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        req = data.draw(stray_requests(), label="request")
        problems = harness.check(req)
        assert not problems, "\n".join(problems)

    before, began = harness.sent, time.monotonic()
    run()
    assert_sent(broker[0], harness, before, began, examples)


def assert_sent(proc: BrokerProcess, harness: Harness, before: int, began: float,
                least: int) -> None:
    """This test sent at least ``least`` requests, and no log line of the broker (so
    far) holds a secret: each test checks what it did, in any order and alone."""
    sent, elapsed = harness.sent - before, time.monotonic() - began
    print(f"\nfuzz: {sent} requests in {elapsed:.1f} s")
    assert sent >= least, f"only {sent} requests in {elapsed:.1f} s (at least {least})"
    pieces = [w.decode() for s in (TOKEN, FAKE_KEY_ID, FAKE_SECRET) for w in windows(s)]
    bad = [line[:200] for line in proc.lines if any(p in line for p in pieces)]
    assert not bad, f"{len(bad)} log line(s) hold a secret, e.g. {bad[0]!r}"
