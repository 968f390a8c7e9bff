"""check_group on jobs: a job's group is a string of 1..128 characters (code points)
without control characters; null is no group; a refusal names where and
quotes the value cut short."""

from __future__ import annotations

from typing import Any

import pytest

from broker.errors import SHOWN_CHARS, InvalidRequest
from broker.model.groups.names import check_group


@pytest.mark.parametrize("name", ["a", "tenant-42", "é" * 128, "\U0001f600" * 128,
                                  '","status":"pending"', "with space", "\u0080\u00a0"])
def test_a_group_name_within_the_rule_is_kept_as_given(name: str) -> None:
    assert check_group(name, "jobs[0].group") == name


def test_null_is_no_group() -> None:
    assert check_group(None, "jobs[0].group") is None


@pytest.mark.parametrize("raw", ["", "x" * 129, "é" * 129, "a\x00", "\x1f", "t\nx",
                                 "tab\there", "del\x7f", 5, True, ["a"], {"a": 1}, 1.5])
def test_a_bad_group_is_refused_naming_where(raw: Any) -> None:
    with pytest.raises(InvalidRequest, match=r"^jobs\[3\]\.group: group must be a string of "
                                             r"1\.\.128 characters without control characters"):
        check_group(raw, "jobs[3].group")


def test_a_long_bad_group_is_quoted_cut_short() -> None:
    with pytest.raises(InvalidRequest) as info:
        check_group("secret-ish " * 1000 + "\x00", "group")
    assert len(info.value.message) < 200 + SHOWN_CHARS
    assert "..." in info.value.message
