"""broker.display: control characters escaped for terminals; docstrings as plain help text."""

from __future__ import annotations

import pytest

from broker.display import plain, printable


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[2J\x1b]0;title\x07", "\\x1b[2J\\x1b]0;title\\x07"),  # clear screen, window title
    ("a\tb\nc\rd", "a\\tb\\nc\\rd"),
    ("\x00\x7f\x80\x9b\x9f", "\\x00\\x7f\\x80\\x9b\\x9f"),  # NUL, DEL, C1 (CSI)
    ("abc\u202edcba\u2066x\u2069", "abc\\u202edcba\\u2066x\\u2069"),  # bidi overrides
    ("plain é ✓ 日本 \\x1b", "plain é ✓ 日本 \\x1b"),  # text and a literal backslash kept
])
def test_printable_escapes_every_control_character(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_printable_leaves_no_c0_del_or_c1_character() -> None:
    every = "".join(map(chr, range(0x250)))
    assert not [c for c in printable(every) if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0]


def test_printable_keeps_line_feeds_only_when_asked() -> None:
    raw = "Traceback:\n  boom\x00\u202e\r\n"
    assert printable(raw) == "Traceback:\\n  boom\\x00\\u202e\\r\\n"
    assert printable(raw, keep_lines=True) == "Traceback:\n  boom\\x00\\u202e\\r\n"


def test_plain_turns_rest_markup_into_text() -> None:
    rst = ("``osqueue``: see :mod:`broker.config` and :class:`~broker.errors.StaleToken`,\n"
           ":ref:`the guide <guide>`. Example::\n\n    osqueue ``x``\n")
    assert plain(rst) == ("osqueue: see broker.config and broker.errors.StaleToken,\n"
                          "the guide. Example:\n\n    osqueue x\n")
