"""The shell blocks of the docs that tests run as written (the jq recipes of
docs/architecture.md)."""

from __future__ import annotations

import re
from pathlib import Path

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def sh_block(heading: str, doc: Path = ARCHITECTURE) -> str:
    """The first ``sh`` block after the text ``heading`` in ``doc``, its ``cd``
    lines dropped (the tests run it in the store's directory)."""
    text = doc.read_text()
    at = text.index(heading)
    block = re.search(r"```sh\n(.*?)```", text[at:], re.S)
    assert block is not None, f"no sh block after {heading!r} in {doc.name}"
    return "\n".join(line for line in block.group(1).splitlines()
                     if not line.startswith("cd "))
