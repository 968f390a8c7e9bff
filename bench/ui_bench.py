"""Dashboard benchmark: how fast the web dashboard answers with a million jobs in a queue
(the target: the overview, a queue's page and a page of the job browser, each under 300 ms).

    .venv/bin/python bench/ui_bench.py [--jobs 1000000] [--rounds 20] [--layout both]

For each layout of a queue's jobs (``--layout``: ``segments``, where a bulk
push of 10,000 jobs or more goes into segment objects, the broker's default;
``head``, every job in the queue object, as smaller pushes
leave them; ``both`` by default), starts a broker process (this script with
``--serve``: a ``BrokerServer`` as ``osqueue-broker`` runs it, GC tuned, a
file store in a temporary directory, a bearer token) and fills queue ``deep``
through the HTTP API:
``--jobs`` bulk-pushed jobs (batches of 100,000, the most one request carries),
then a claim of 2,000 of them, 500 failed (dead: the queue's ``max_attempts``
is 1), 500 completed, 100 marked for cancellation, and 100 pending ones
cancelled (archived, so they leave the queue), so every status is there; and a
small queue ``small`` beside it. Then, over HTTP with the token as a bearer header (as a script
reads the dashboard), it times each page ``--rounds`` times after two untimed
warm-ups, one request at a time:

* ``overview``: ``/ui/`` (every queue's counts, oldest pending age, commit
  rate, state, owner);
* ``queue_page``: ``/ui/queues/deep`` (its summary and the first page of its
  jobs, 50 rows);
* ``summary_fragment``, ``table_fragment`` (the job browser's first page, as its
  table refreshes itself) and ``history_json``: what the queue page polls;
* the job browser: ``browser_first`` (first page), ``browser_middle``
  (``?after=500000`` at a million jobs: a page from the middle by seq cursor),
  ``browser_back`` (``?before=500000``), ``browser_dead`` (``?status=dead``: a
  status filter), ``browser_claimed_middle`` (``?status=claimed&after=500000``:
  a filter with nothing after the cursor, the worst case: the rest of the
  table is read, and back to the last match before it), ``browser_cancelled``
  (``?status=cancelled``: a filter no job matches once the cancelled ones are
  archived, the whole table read);
* ``browser_new_segment``: a page whose cursor lies in a segment object whose
  lines the broker has not loaded yet, a different one each round (a bulk
  push of 10,000 jobs or more goes into segment objects of up to 65,536 jobs),
  so each round reads one from the store;
* ``job_page``: ``/ui/queues/deep/jobs/j0000500000``.

For comparison, not a dashboard page: ``api_stats`` (``GET /v1/queues/deep/stats``).

Prints a table per layout (median, p95 and max in ms; ``ok`` when p95 is under
300 ms) and writes bench/results/ui_bench.json.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import urllib3  # noqa: E402

from bench._common import write_results  # noqa: E402
from osqueue_spark import QueueClient  # noqa: E402

TOKEN = "ui-bench-token-4f1d"
#: The broker's line once it serves (see broker/cli.py).
READY = re.compile(r"ready on (http://\S+)")
LIMIT_MS = 300.0


def serve(store: str, segment_push_jobs: int) -> None:
    """Run a broker as ``osqueue-broker`` does (GC tuned for a broker's process), with
    bulk pushes of ``segment_push_jobs`` jobs or more going into segment objects (0:
    never); print its ready line on stderr. (The child process of :func:`start_broker`.)"""
    from broker.http.server import BrokerServer
    from broker.service.config import BrokerConfig
    from broker.storage import store_from_url

    config = BrokerConfig(segment_push_jobs=segment_push_jobs, max_request_bytes=256 << 20)
    BrokerServer(store_from_url(store), "127.0.0.1", 0, token=TOKEN, config=config,
                 tune_gc=True, on_ready=lambda server: print(
                     f"ready on {server.url}", file=sys.stderr, flush=True)).run()


def start_broker(store: str, segment_push_jobs: int) -> tuple[subprocess.Popen[str], str]:
    """A broker process on 127.0.0.1 (a free port); its URL once it serves."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", store, "--segment-push-jobs",
         str(segment_push_jobs)],
        cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        found = READY.search(line)
        if found:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep it drained
            return proc, found.group(1)
    raise RuntimeError("the broker did not start")


def fill(url: str, jobs: int) -> dict[str, float]:
    """Queue ``deep`` with ``jobs`` jobs of every status; ``small`` beside it."""
    deep = QueueClient(url, "deep", token=TOKEN, timeout_s=600)
    deep.create(max_attempts=1, max_state_bytes=1 << 40)
    started = time.perf_counter()
    for first in range(0, jobs, 100_000):
        deep.push_many(({"doc": i, "path": f"s3://bucket/docs/{i}.json"}
                        for i in range(first, min(jobs, first + 100_000))), batch_size=100_000)
    pushed = time.perf_counter() - started
    claimed = deep.claim("bench-worker", max_jobs=2000, lease_s=3600)
    deep.fail_many([(j.token, "ValueError: bench", None) for j in claimed[:500]])
    deep.complete_many([(j.token, {"ok": True}) for j in claimed[500:1000]])
    deep.cancel([j.id for j in claimed[1000:1100]] +  # marked
                [f"j{seq:010d}" for seq in range(2001, 2101)])  # pending: cancelled
    small = QueueClient(url, "small", token=TOKEN)
    small.push_many([{"n": i} for i in range(100)])
    return {"fill_s": round(pushed, 1)}


def pages(jobs: int) -> dict[str, str]:
    """What is timed, by name (``middle``: the seq halfway through the queue)."""
    middle = jobs // 2
    return {
        "overview": "/ui/",
        "queue_page": "/ui/queues/deep",
        "summary_fragment": "/ui/queues/deep/summary",
        "table_fragment": "/ui/queues/deep/table?limit=50",
        "history_json": "/ui/queues/deep/history.json",
        "browser_first": "/ui/queues/deep?limit=50",
        "browser_middle": f"/ui/queues/deep?limit=50&after={middle}",
        "browser_back": f"/ui/queues/deep?limit=50&before={middle}",
        "browser_dead": "/ui/queues/deep?limit=50&status=dead",
        "browser_claimed_middle": f"/ui/queues/deep?limit=50&status=claimed&after={middle}",
        "browser_cancelled": "/ui/queues/deep?limit=50&status=cancelled",
        "browser_new_segment": "/ui/queues/deep?limit=50&after={cold}",
        "job_page": f"/ui/queues/deep/jobs/j{middle:010d}",
        "api_stats": "/v1/queues/deep/stats",
    }


def cold_cursor(jobs: int, i: int) -> int:
    """Round ``i``'s cursor for ``browser_new_segment``: a seq whose segment object's
    lines the broker has not loaded (it keeps a few segments' lines per queue):
    rounds walk the queue in strides of 65,537 seqs (one more than a segment
    holds), each landing in the next segment, wrapping only after the whole
    queue was walked."""
    return (2_500 + i * 65_537) % max(1, jobs - 100)


def timed(http: urllib3.PoolManager, url: str, rounds: int, jobs: int) -> dict[str, Any]:
    """Milliseconds of ``rounds`` GETs of ``url`` (after two untimed ones); ``{cold}``
    in it is :func:`cold_cursor` of the round."""
    headers = {"authorization": f"Bearer {TOKEN}"}
    samples = []
    for i in range(rounds + 2):
        start = time.perf_counter()
        answer = http.request("GET", url.replace("{cold}", str(cold_cursor(jobs, i))),
                              headers=headers, retries=False)
        elapsed = (time.perf_counter() - start) * 1000
        if answer.status != 200:
            raise RuntimeError(f"GET {url} answered {answer.status}: {answer.data[:200]!r}")
        if i >= 2:
            samples.append(elapsed)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return {"median_ms": round(statistics.median(samples), 1), "p95_ms": round(p95, 1),
            "max_ms": round(samples[-1], 1), "bytes": len(answer.data)}


#: The layouts a queue's jobs can have: in segment objects (a bulk push of 10,000 jobs
#: or more, the broker's default), or all in the queue object.
LAYOUTS = {"segments": 10_000, "head": 0}


def run_layout(layout: str, jobs: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ui-bench-") as store:
        proc, url = start_broker(f"file://{store}", LAYOUTS[layout])
        try:
            facts = fill(url, jobs)
            http = urllib3.PoolManager(maxsize=1)
            timed_pages = pages(jobs)
            rows = {name: timed(http, url + path, rounds, jobs)
                    for name, path in timed_pages.items()}
        finally:
            proc.terminate()
            proc.wait(120)
    print(f"\n{jobs:,} jobs in queue 'deep', {layout} layout (filled in {facts['fill_s']} s); "
          f"{rounds} rounds each, one request at a time")
    print(f"{'page':<24}{'median ms':>10}{'p95 ms':>9}{'max ms':>9}  under {LIMIT_MS:.0f} ms")
    for name, row in rows.items():
        verdict = "n/a (API)" if name == "api_stats" else \
            ("ok" if row["p95_ms"] < LIMIT_MS else "SLOW")
        row["ok"] = verdict == "ok" if name != "api_stats" else None
        print(f"{name:<24}{row['median_ms']:>10}{row['p95_ms']:>9}{row['max_ms']:>9}  {verdict}")
    return {**facts, "segment_push_jobs": LAYOUTS[layout], "pages": timed_pages,
            "results": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--layout", choices=[*LAYOUTS, "both"], default="both")
    parser.add_argument("--serve", metavar="STORE", help=argparse.SUPPRESS)
    parser.add_argument("--segment-push-jobs", type=int, default=10_000, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.segment_push_jobs)
        return 0
    layouts = list(LAYOUTS) if args.layout == "both" else [args.layout]
    results = {layout: run_layout(layout, args.jobs, args.rounds) for layout in layouts}
    path = write_results("ui_bench", {"jobs": args.jobs, "rounds": args.rounds,
                                      "limit_ms": LIMIT_MS, "layouts": results})
    print(f"wrote {path.relative_to(ROOT)}")
    return 0 if all(r["ok"] is not False for layout in results.values()
                    for r in layout["results"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
