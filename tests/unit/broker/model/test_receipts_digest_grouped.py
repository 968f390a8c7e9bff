"""A push's digest (broker.model.receipts.push_digest) when every job is a
NewJob with a group (a grouped push, read in C loops) is the digest the one
formula gives any list of jobs (payload lengths, payloads, then the options of
each job: none for a bare payload or a job at its defaults, four without a
group, five with one): random lists of bare payloads and NewJobs with and
without groups and options, all grouped or mixed, digest for digest; and a
grouped push's digest tells its groups and options apart."""

from __future__ import annotations

import hashlib
from array import array
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model.ops import NewJob
from broker.model.receipts import DIGEST_BYTES, push_digest

payload_st = st.sampled_from([b"1", b'{"n":1}', b'"x"', b"[]", b'{"doc":"d\\u00e9"}'])
grouped_st = st.builds(NewJob, payload_st, st.sampled_from([0, 0, 3, -2]),
                       st.sampled_from([0, 0, 1_500]), st.sampled_from([None, None, 4]),
                       st.sampled_from([None, None, "k"]), st.sampled_from(["a", "g00001", "é"]))
job_st = st.one_of(payload_st, grouped_st,
                   st.builds(NewJob, payload_st, st.sampled_from([0, 1]), st.just(0),
                             st.just(None), st.just(None), st.just(None)))


def _formula(jobs: list[Any]) -> str:
    payloads = [job if isinstance(job, bytes) else job.payload for job in jobs]
    listed = []
    for job in jobs:
        if isinstance(job, bytes) or tuple(job[1:]) == (0, 0, None, None, None):
            listed.append(None)
        elif job.group is None:
            listed.append(list(job[1:5]))
        else:
            listed.append(list(job[1:]))
    h = hashlib.sha256(array("Q", [len(p) for p in payloads]).tobytes())
    h.update(b"".join(payloads))
    h.update(orjson.dumps(listed) if any(x is not None for x in listed) else b"")
    return h.hexdigest()[:2 * DIGEST_BYTES]


@settings(max_examples=300, deadline=None)
@given(jobs=st.one_of(st.lists(grouped_st, min_size=1, max_size=12),
                      st.lists(job_st, min_size=1, max_size=12)))
def test_a_grouped_push_digest_is_the_formulas(jobs: list[Any]) -> None:
    assert push_digest(jobs) == _formula(jobs)


def test_a_grouped_push_digest_tells_groups_and_options_apart() -> None:
    base = [NewJob(b"1", group="a"), NewJob(b"2", group="b")]
    others = [
        [NewJob(b"1", group="a"), NewJob(b"2", group="a")],
        [NewJob(b"1", group="a"), NewJob(b"2", priority=1, group="b")],
        [NewJob(b"1", group="a"), b"2"],  # (a job at its defaults counts as bare)
        [NewJob(b"12", group="a"), NewJob(b"", group="b")],
    ]
    assert len({push_digest(jobs) for jobs in [base, *others]}) == 1 + len(others)
