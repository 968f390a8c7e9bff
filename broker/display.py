"""Text as a terminal or a web page may show it: control characters escaped.

A worker name, a job's ``last_error``, a queue object's text or a store URL can
hold terminal escape sequences (clear the screen, set the window title, move the
cursor), NULs, or bidirectional overrides that reorder what is read. Every
human-readable line the command-line tools print, and every value the web
dashboard shows (:mod:`broker.http.ui`), goes through :func:`printable`,
which writes each such character as a visible escape instead: ``\\x1b``,
``\\x00``, ``\\u202e``; a block of several lines (an error's traceback, a
payload indented for reading) keeps its line breaks (``keep_lines``). Machine
output (``--json``) is JSON, whose encoder escapes them already. :func:`plain`
turns a docstring's reST markup into the plain text a ``--help`` shows.
"""

from __future__ import annotations

import re

#: Named escapes for the common C0 characters; every other escaped one is \\xNN or \\uNNNN.
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}

#: Unicode's bidirectional formatting characters: they reorder the text around them.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))


def _escape(code: int) -> str:
    return _NAMED.get(chr(code)) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


#: C0 (U+0000..U+001F), DEL (U+007F), C1 (U+0080..U+009F) and the bidi controls.
_TABLE = {code: _escape(code)
          for code in (*range(0x20), *range(0x7F, 0xA0), *_BIDI)}


#: The same, line feeds kept.
_LINES_TABLE = {code: escaped for code, escaped in _TABLE.items() if code != 0x0A}


def printable(text: str, *, keep_lines: bool = False) -> str:
    """``text`` with every control character (C0, DEL, C1, bidi override) written as a
    visible backslash escape; the rest, other non-ASCII text included, unchanged.
    ``keep_lines``: line feeds stay (for text shown as a block of lines)."""
    return text.translate(_LINES_TABLE if keep_lines else _TABLE)


_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")  # :mod:`x`, :class:`~a.B`, :ref:`t <x>`
_LITERAL = re.compile(r"``(.+?)``")


def plain(rst: str) -> str:
    """``rst`` (a docstring) as plain text: ````x```` and ``:role:`x``` become ``x``,
    and a paragraph's closing ``::`` a ``:``."""
    text = _ROLE.sub(lambda m: m.group(1), rst)
    text = _LITERAL.sub(r"\1", text)
    return re.sub(r"(\S)::$", r"\1:", text, flags=re.MULTILINE)
