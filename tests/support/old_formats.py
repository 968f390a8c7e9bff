"""The spellings of the queue object before format version 5, made from newer
bytes, for the tests that check old objects load and are written as today's."""

from __future__ import annotations

import re
from typing import Any

#: What version 4 adds after the header when the queue has no segments.
NO_SEGMENTS = b',\n"segments":[]'
JOBS = b',\n"jobs":['


def as_v4(v3: bytes, key: bytes = b"") -> bytes:
    """A version-3 object's bytes as version 4 writes the same queue: version 4,
    ``key`` (a token key field, or nothing) and ``"segments":[]`` after the header."""
    head, sep, rest = v3.partition(JOBS)
    assert sep and head.startswith(b'{"format":"osqueue","version":3,'), head[:40]
    return head.replace(b'"version":3', b'"version":4', 1) + key + NO_SEGMENTS + sep + rest


#: A job line's error history, as ``broker.model.job_lines.errors_field`` spells it
#: (texts of the old fixtures hold no quote, backslash or bracket).
_ERRORS_FIELD = re.compile(rb',"errors":\[(?:\[\d+,"[^"]+",(?:null|"[^"\\\]\[]*")\],?)+\]')


def without_histories(data: bytes) -> bytes:
    """A head's bytes as a broker before error histories wrote them: every
    job line's ``"errors"`` field cut (its newest text is ``last_error`` anyway)."""
    return _ERRORS_FIELD.sub(b"", data)


def as_old_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plain jobs (``Job.to_plain``) of a head from before error histories, as its
    lines spelled them: each one's ``errors`` checked to be what loading such a
    line makes of its ``last_error`` (one entry of that text; none without one)
    and dropped."""
    out = []
    for job in jobs:
        job = dict(job)
        errors = job.pop("errors", [])
        if job.get("last_error") is None:
            assert errors == [], job["id"]
        else:
            assert [e["error"] for e in errors] == [job["last_error"]], job["id"]
        out.append(job)
    return out
