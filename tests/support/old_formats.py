"""The spellings of the queue object before format version 5, made from newer
bytes, for the tests that check old objects load and are written as today's."""

from __future__ import annotations

#: What version 4 adds after the header when the queue has no segments.
NO_SEGMENTS = b',\n"segments":[]'
JOBS = b',\n"jobs":['


def as_v4(v3: bytes, key: bytes = b"") -> bytes:
    """A version-3 object's bytes as version 4 writes the same queue: version 4,
    ``key`` (a token key field, or nothing) and ``"segments":[]`` after the header."""
    head, sep, rest = v3.partition(JOBS)
    assert sep and head.startswith(b'{"format":"osqueue","version":3,'), head[:40]
    return head.replace(b'"version":3', b'"version":4', 1) + key + NO_SEGMENTS + sep + rest
