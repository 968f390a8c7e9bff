"""A number or integer field far out of range (broker.model.checks.number_field,
int_field; broker.model.inserts.validate_new) is refused with 422 and a message
that quotes it by its first characters only, as docs/security.md promises (at
most 60), on every hot call that takes one: claim, push (JSON and staged lines),
heartbeat, fail. A whole number too large for a double (400 digits) used to end
in ``OverflowError``, a 500 ``internal`` answer with a traceback in the log, and
one of 4,000 digits was quoted in full. Over HTTP in process, the store
byte-identical after each refusal; and from the functions themselves."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from broker.errors import SHOWN_CHARS, InvalidRequest
from broker.http import schemas
from broker.http.app import App
from broker.model.checks import int_field, number_field
from broker.model.inserts import validate_new
from broker.model.ops import NewJob
from broker.storage import MemoryStore
from broker.wire import STAGED_CONTENT_TYPE
from tests.support.asgi import call
from tests.support.inprocess import run, started
from tests.support.states import queue_of
from tests.support.store_files import snapshot

#: Whole numbers past a double's range (about 309 digits), below and near the
#: 4,300 digits Python converts to an int, and negative.
HUGE = ["7" * 400, "7" * 4000, "-" + "7" * 4000]
HUGE_IDS = ["400 digits", "4000 digits", "minus 4000 digits"]
#: More digits in a row than a message may quote.
LONG_RUN = re.compile(rf"\d{{{SHOWN_CHARS + 1}}}")


JSON = "application/json"
#: (id, action, the field as the message names it, the body (VALUE: the number), type)
CALLS: list[tuple[str, str, str, str, str]] = [
    *[(f"claim {f}", "claim", f, '{"worker": "w", "FIELD": VALUE}'.replace("FIELD", f), JSON)
      for f in ("max_jobs", "lease_s", "wait_s")],
    *[(f"push {f}", "push", f"jobs[0].{f}",
       '{"jobs": [{"payload": 1, "FIELD": VALUE}]}'.replace("FIELD", f), JSON)
      for f in ("priority", "delay_s", "max_attempts")],
    *[(f"staged push {f}", "push", f"line 0: {f}", '{"FIELD": VALUE}\t1\n'.replace("FIELD", f),
       STAGED_CONTENT_TYPE) for f in ("priority", "delay_s", "max_attempts")],
    ("heartbeat lease_s", "heartbeat", "lease_s", '{"tokens": ["t"], "lease_s": VALUE}', JSON),
    ("fail retry_in_s", "fail", "items[0].retry_in_s",
     '{"items": [{"token": "t", "error": "e", "retry_in_s": VALUE}]}', JSON),
]


def assert_quoted_short(message: str, value: str, field: str) -> None:
    """``message`` refuses ``field`` as out of range and quotes ``value`` by at most
    SHOWN_CHARS (and a cut's ``...``) of its characters."""
    prefix = f"field '{field}' must be within ["
    assert message.startswith(prefix), message
    _, sep, quoted = message.partition("], got ")
    assert sep, message
    assert len(quoted) <= SHOWN_CHARS + 5, message
    assert LONG_RUN.search(message) is None, message
    assert quoted.lstrip("-")[:10] == value.lstrip("-")[:10], message  # its first digits


@pytest.mark.parametrize("value", HUGE, ids=HUGE_IDS)
@pytest.mark.parametrize(("name", "action", "field", "template", "content_type"), CALLS,
                         ids=[c[0] for c in CALLS])
def test_a_huge_number_is_refused_with_a_short_quote_over_http(
        name: str, action: str, field: str, template: str, content_type: str, value: str,
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> tuple[int, bytes, bool]:
        store = MemoryStore()
        broker = await started(store)
        try:
            await broker.push("q", [b'{"n": 1}'])
            await broker.claim("q", "w0", lease_s=3600)
            before = snapshot(store)
            status, out, _ = await call(App(broker), "POST", f"/v1/queues/q/{action}",
                                        template.replace("VALUE", value).encode(),
                                        content_type=content_type)
            same = snapshot(store) == before
        finally:
            await broker.stop(5)
        return status, out, same

    with caplog.at_level(logging.WARNING, logger="osqueue"):
        status, out, same = run(main())
    error = schemas.ErrorBody.model_validate_json(out)
    assert (status, error.code) == (422, "invalid_request"), (status, error.error)
    assert_quoted_short(error.error, value, field)
    assert same, "a refused request changed the store"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], \
        [r.getMessage()[:200] for r in caplog.records]


@pytest.mark.parametrize("value", [int(v) for v in HUGE], ids=HUGE_IDS)
def test_number_field_and_int_field_refuse_a_huge_number_short(value: int) -> None:
    body: dict[str, Any] = {"n": value}
    with pytest.raises(InvalidRequest) as as_number:
        number_field(body, "n", 0.0, lo=0.0, hi=60.0)
    with pytest.raises(InvalidRequest) as as_int:
        int_field(body, "n", 0, lo=0, hi=60)
    for exc in (as_number.value, as_int.value):
        assert_quoted_short(exc.message, str(value), "n")


def test_number_field_still_takes_numbers_in_range_and_refuses_infinity() -> None:
    assert number_field({"n": 60}, "n", 0.0, hi=60.0) == 60.0
    assert number_field({"n": 0.5}, "n", 0.0, hi=60.0) == 0.5
    assert number_field({}, "n", 3.0, hi=60.0) == 3.0
    with pytest.raises(InvalidRequest, match="must be a finite number, got inf"):
        number_field({"n": float("inf")}, "n", 0.0)  # no upper bound: still refused
    with pytest.raises(InvalidRequest, match="must be within"):
        number_field({"n": 10 ** 400}, "n", 0.0, hi=60.0)


@pytest.mark.parametrize(("job", "what"), [
    (NewJob(b"1", priority=10 ** 3999), "priority must be within"),
    (NewJob(b"1", priority=-(10 ** 3999)), "priority must be within"),
    (NewJob(b"1", delay_ms=10 ** 400), "delay must be within"),
    (NewJob(b"1", max_attempts=10 ** 3999), "max_attempts must be 1.."),
], ids=["priority", "negative priority", "delay", "max_attempts"])
def test_validate_new_quotes_a_huge_option_short(job: NewJob, what: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        validate_new(queue_of(1, 0), job)
    message = refused.value.message
    assert message.startswith(what), message
    assert LONG_RUN.search(message) is None, message
    assert len(message) <= 60 + SHOWN_CHARS + 5, message
