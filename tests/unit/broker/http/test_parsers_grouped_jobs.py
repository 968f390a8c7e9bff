"""A push body's jobs of the shape ``{"payload": ..., "group": ...}``
(broker.http.parsers.parse_new_jobs' fast path for grouped jobs, with its cache
of group names already checked) read as the general way reads any job (the
fields checked, the payload, then each option: broker.model.checks), job for
job, and a bad one is refused with the same message: random bodies mixing
grouped, plain and optioned jobs, good and bad group names (empty, too long,
control characters, lone surrogates, not strings, null) and payloads (too
deep, numbers a double does not hold), each parsed twice (the cache then warm)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import InvalidRequest
from broker.http import parsers
from broker.limits import MAX_DEPTH, MAX_GROUP_CHARS
from broker.model.checks import dumps_value, job_options, object_of
from broker.model.ops import NewJob
from broker.wire import parse_json

GOOD_GROUPS = ["a", "g00001", "é 漢", "x" * MAX_GROUP_CHARS, " "]
BAD_GROUPS = ["", "x" * (MAX_GROUP_CHARS + 1), "a\x01", "\x7f", 5, True, [], {"g": 1}]
PAYLOADS = [b"1", b'{"n":1,"doc":"d"}', b'"s"', b"null", b"1e400", b"0.1000000000000000055511",
            b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)]


def _job(payload: bytes, fields: dict[str, Any]) -> bytes:
    inner = b",".join(b'"%s":%s' % (k.encode(), orjson.dumps(v)) for k, v in fields.items())
    return b'{"payload":' + payload + (b"," + inner if inner else b"") + b"}"


job_st = st.tuples(st.sampled_from(PAYLOADS), st.one_of(
    st.builds(lambda g: {"group": g}, st.sampled_from(GOOD_GROUPS + BAD_GROUPS + [None])),
    st.just({}),
    st.builds(lambda g, p: {"group": g, "priority": p}, st.sampled_from(GOOD_GROUPS),
              st.sampled_from([0, 1])),
))


def _general(body: dict[str, Any]) -> list[NewJob]:
    """Every job the general way (NewJob whatever its options)."""
    out = []
    for i, raw in enumerate(body["jobs"]):
        where = f"jobs[{i}]."
        item = object_of(raw, parsers._JOB_FIELDS, f"jobs[{i}]", nested=True)
        out.append(NewJob(dumps_value(item["payload"], f"jobs[{i}].payload"),
                          *job_options(item, where)))
    return out


def _outcome(parse: Any, body: dict[str, Any]) -> Any:
    try:
        jobs = parse(body)
    except InvalidRequest as exc:
        return "refused", str(exc)
    return [job if isinstance(job, NewJob) else NewJob(job) for job in jobs]


@settings(max_examples=300, deadline=None)
@given(jobs=st.lists(job_st, min_size=1, max_size=8))
def test_grouped_jobs_read_as_the_general_way_reads_them(
        jobs: list[tuple[bytes, dict[str, Any]]]) -> None:
    body = parse_json(b'{"jobs":[' + b",".join(_job(p, f) for p, f in jobs) + b"]}")
    expected = _outcome(_general, body)
    for _ in range(2):
        assert _outcome(parsers.parse_new_jobs, body) == expected


@pytest.mark.parametrize("group", BAD_GROUPS)
def test_a_bad_group_is_refused_also_after_good_ones_filled_the_cache(group: Any) -> None:
    good = parse_json(b'{"jobs":[' + b",".join(_job(b"1", {"group": g}) for g in GOOD_GROUPS)
                      + b"]}")
    assert [job.group for job in parsers.parse_new_jobs(good)] == GOOD_GROUPS
    body = parse_json(b'{"jobs":[' + _job(b"1", {"group": "a"}) + b","
                      + _job(b"2", {"group": group}) + b"]}")
    with pytest.raises(InvalidRequest, match=r"field 'jobs\[1\]\.group': group must be"):
        parsers.parse_new_jobs(body)
