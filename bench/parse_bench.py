"""What the hand parsers (broker.http.parsers) save over validating with the models
(broker.http.schemas).

For each body it times, per request, three ways to turn the bytes into what
the broker applies:

* ``hand``: ``orjson.loads`` and the ``parsers.parse_*`` the server uses;
* ``model``: ``orjson.loads`` and ``Model.model_validate``, then the same
  conversion to operations (payloads re-encoded to bytes);
* ``model_json``: ``Model.model_validate_json`` on the bytes, then the conversion.

The three run in interleaved rounds (``--repeat``, the order turning each round),
each round timing a loop of many requests; a figure is the best round's time per
request, a ratio (``model_over_hand``...) the median of the rounds' ratios.

    .venv/bin/python bench/parse_bench.py [--jobs 1000] [--repeat 7]

Prints a table and writes bench/results/parse_bench.json.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from bench._common import interleaved, median_ratio, write_results
from broker.http import parsers, schemas
from broker.model.ops import CompleteItem, NewJob


def push_ops(m: Any) -> list[NewJob | bytes]:
    dumps = orjson.dumps
    return [NewJob(dumps(j.payload), j.priority, round(j.delay_s * 1000),
                               j.max_attempts, j.key) for j in m.jobs]


def complete_ops(m: Any) -> list[CompleteItem]:
    return [CompleteItem(i.token, None if i.result is None
                                     else orjson.dumps(i.result)) for i in m.items]


def cases(n: int) -> list[tuple[str, bytes, Callable[[Any], Any], type, Callable[[Any], Any]]]:
    doc = {"doc": 1, "path": "s3://bucket/docs/1.json", "tags": ["a", "b"]}
    push = orjson.dumps({"jobs": [{"payload": {**doc, "doc": i}} for i in range(n)]})
    push_opts = orjson.dumps({"jobs": [{"payload": {**doc, "doc": i}, "priority": i % 5,
                                        "key": f"k{i}"} for i in range(n)]})
    tokens = [f"j{i:012d}.1.abcdef0123456789" for i in range(n)]
    complete = orjson.dumps({"items": [{"token": t, "result": {"ok": True}} for t in tokens]})
    claim = orjson.dumps({"worker": "w-1", "max_jobs": 100, "lease_s": 60, "wait_s": 1})
    return [
        (f"push {n} jobs", push, parsers.parse_push, schemas.PushRequest, push_ops),
        (f"push {n} jobs, options", push_opts, parsers.parse_push, schemas.PushRequest, push_ops),
        (f"complete {n} items", complete, parsers.parse_complete, schemas.CompleteRequest,
         complete_ops),
        ("claim", claim, parsers.parse_claim, schemas.ClaimRequest, lambda m: m.model_dump()),
    ]


def same(a: Any, b: Any) -> bool:
    """Equal results; a bare payload is the same job as a NewJob with default options."""
    def norm(x: Any) -> Any:
        return [NewJob(j) if isinstance(j, bytes) else j for j in x] \
            if isinstance(x, list) else x
    return bool(norm(a) == norm(b))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000, help="jobs or items in a batch body")
    p.add_argument("--repeat", type=int, default=7, help="interleaved rounds (best of them)")
    args = p.parse_args(argv)
    loads = orjson.loads
    rows = []
    print(f"{'body':<28}{'bytes':>9}{'hand us':>11}{'model us':>11}{'json us':>11}"
          f"{'model/hand':>12}")
    for name, body, hand, model, to_ops in cases(args.jobs):
        assert same(to_ops(model.model_validate(loads(body))), hand(loads(body))), name
        loops = max(1, 20_000 // max(1, len(body) // 100))

        def many(fn: Callable[[], Any], loops: int = loops) -> Callable[[], None]:
            def run() -> None:
                for _ in range(loops):
                    fn()
            return run

        timed = interleaved({
            "hand": many(lambda b=body, h=hand: h(loads(b))),
            "model": many(lambda b=body, m=model, c=to_ops: c(m.model_validate(loads(b)))),
            "model_json": many(lambda b=body, m=model, c=to_ops: c(m.model_validate_json(b))),
        }, args.repeat)
        per = {k: [t / loops * 1e6 for t in v] for k, v in timed["seconds"].items()}
        t_hand, t_model, t_json = min(per["hand"]), min(per["model"]), min(per["model_json"])
        rows.append({"body": name, "bytes": len(body), "hand_us": round(t_hand, 2),
                     "model_us": round(t_model, 2), "model_json_us": round(t_json, 2),
                     "model_over_hand": round(median_ratio(per["model"], per["hand"]), 2),
                     "model_json_over_hand": round(median_ratio(per["model_json"],
                                                                per["hand"]), 2),
                     "us_rounds": {k: [round(t, 2) for t in v] for k, v in per.items()},
                     "load_rounds": timed["load"]})
        print(f"{name:<28}{len(body):>9}{t_hand:>11.1f}{t_model:>11.1f}{t_json:>11.1f}"
              f"{rows[-1]['model_over_hand']:>11.2f}x")
    path = write_results("parse_bench", {"jobs": args.jobs, "repeat": args.repeat,
                                         "results": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
