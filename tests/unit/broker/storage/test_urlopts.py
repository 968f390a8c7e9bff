"""store_from_url and shown_url: credentials in a store URL are refused, never repeated.

A store URL with a user or password (``s3://KEY:SECRET@bucket/x``) used to reach the
store's SDK, whose error ("Invalid bucket name "KEY:SECRET@bucket"") printed the
secret. Every scheme now refuses user info before anything is opened, and every
message quotes the URL as shown_url shows it.
"""

from __future__ import annotations

import pytest

from broker.errors import InvalidRequest
from broker.storage import shown_url, store_from_url

SECRET = "S3cr3tV4lue"


@pytest.mark.parametrize("url", [
    f"s3://AKIAEXAMPLE:{SECRET}@bucket/x",
    f"s3://{SECRET}@bucket/x",
    f"gs://user:{SECRET}@bucket/x",
    f"file://user:{SECRET}@localhost/tmp/osq",
    f"file://{SECRET}@/tmp/osq",
    f"memory://user:{SECRET}@name",
    f"az://container:{SECRET}@host/p",
    f"az://{SECRET}@container/p",
    f"abfss://container:{SECRET}@acct.dfs.core.windows.net/p",
    f"abfss://a@{SECRET}@acct.dfs.core.windows.net/p",
    f"s3://bucket/x?endpoint=http://user:{SECRET}@127.0.0.1:9",
    f"gs://bucket/x?endpoint=http://user:{SECRET}@127.0.0.1:9",
])
def test_a_store_url_with_user_info_is_refused_without_repeating_it(
        url: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        store_from_url(url)
    message = str(info.value)
    assert "must not carry a user or password" in message
    assert SECRET not in message and SECRET not in repr(info.value)


def test_an_endpoint_url_with_user_info_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="store endpoints must not carry") as info:
        store_from_url("s3://bucket/x", endpoint_url=f"http://u:{SECRET}@127.0.0.1:9")
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("url", [
    f"s3://[{SECRET}/x",                       # unparseable host
    f"{SECRET}:{SECRET}@bucket/x",             # no scheme: "KEY:SECRET@bucket" reads as one
    f"/{SECRET}/dir",                          # a path, not a URL
    f"file://host{SECRET}/dir",                # file URLs take no host
    f"s3:///x?retries={SECRET * 8}",           # no bucket
    f"s3://b/x?retries={SECRET * 8}",          # a long bad option value: a short prefix only
])
def test_every_refusal_quotes_at_most_a_safe_part_of_the_url(url: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        store_from_url(url)
    message = str(info.value)
    assert SECRET * 4 not in message and len(message) < 300
    if "@" in url or url.startswith(("s3://[", "/")):
        assert SECRET not in message


@pytest.mark.parametrize(("url", "shown"), [
    ("s3://AKIA:SECRET@bucket/x?endpoint=http://h", "s3://***@bucket/x"),
    ("file:///var/lib/osq?trust_mount=fuse", "file:///var/lib/osq"),
    ("abfss://cont@acct.dfs.core.windows.net/p?sig=SECRET",
     "abfss://cont@acct.dfs.core.windows.net/p"),
    ("abfss://cont:SECRET@acct.dfs.core.windows.net/p", "abfss://***@acct.dfs.core.windows.net/p"),
    ("AKIA:SECRET@bucket/x", "akia://..."),
    ("nothing", "(a URL without a scheme)"),
    ("s3://[x", "(a malformed URL)"),
])
def test_shown_url_drops_user_info_and_query(url: str, shown: str) -> None:
    assert shown_url(url) == shown
