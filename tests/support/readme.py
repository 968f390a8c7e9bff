"""The README's code blocks, found by the HTML comment just above each
(``<!-- readme-example -->``), for the tests that run them as printed."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def block_after(marker: str, lang: str) -> str:
    """The fenced ``lang`` block that directly follows the HTML comment ``marker``."""
    text = README.read_text(encoding="utf-8")
    pattern = re.escape(f"<!-- {marker} -->") + r"\n```" + re.escape(lang) + r"\n(.*?)\n```"
    found = re.findall(pattern, text, flags=re.DOTALL)
    assert len(found) == 1, f"README.md needs exactly one ```{lang} block after <!-- {marker} -->"
    return found[0] + "\n"
