"""A page's ``limit`` out of range (broker.model.views.list_page, broker.model.browse.page)
is refused with a message that quotes it by its first characters only, as
docs/security.md promises (at most 60), however many digits it has: over HTTP
(``GET .../jobs?limit=``, in process) and from the model itself."""

from __future__ import annotations

import pytest

from broker.errors import SHOWN_CHARS, InvalidRequest
from broker.http import schemas
from broker.http.app import App
from broker.model import browse, views
from broker.storage import MemoryStore
from tests.support.asgi import call
from tests.support.inprocess import run, started
from tests.support.states import queue_of

PREFIX = "limit must be 1..10000, got "
HUGE = ["9" * 4000, "-" + "1" * 4000, "10001" + "0" * 100]
NAMES = ["4000 nines", "minus 4000 ones", "10001 and 100 zeros"]


@pytest.mark.parametrize("limit", HUGE, ids=NAMES)
def test_list_page_over_http_quotes_a_bad_limit_by_its_first_characters(limit: str) -> None:
    async def main() -> None:
        broker = await started(MemoryStore())
        try:
            await broker.push("q", [b"1"])
            status, out, _ = await call(App(broker), "GET", "/v1/queues/q/jobs",
                                        query=f"limit={limit}")
        finally:
            await broker.stop(5)
        error = schemas.ErrorBody.model_validate_json(out)
        assert status == 422 and error.code == "invalid_request"
        assert error.error.startswith(PREFIX), error.error
        assert len(error.error) <= len(PREFIX) + SHOWN_CHARS, error.error

    run(main())


@pytest.mark.parametrize("limit", [int(text) for text in HUGE], ids=NAMES)
def test_list_page_and_browse_page_quote_a_bad_limit_short(limit: int) -> None:
    state = queue_of(3, 0)
    with pytest.raises(InvalidRequest) as listed:
        views.list_page(state, None, limit)
    with pytest.raises(InvalidRequest) as browsed:
        browse.page(state, 0, None, None, None, limit)
    for exc, most in ((listed.value, views.MAX_PAGE_JOBS), (browsed.value, browse.MAX_PAGE)):
        prefix = f"limit must be 1..{most}, got "
        assert exc.message.startswith(prefix), exc.message
        assert len(exc.message) <= len(prefix) + SHOWN_CHARS, exc.message
