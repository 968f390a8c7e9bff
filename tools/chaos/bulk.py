"""The producers whose jobs go by reference (into segment objects): bulk pushes of bare payloads
and Spark-sized publishes of staged chunks, each of at least the brokers'
``--segment-push-jobs`` jobs, so the broker writes them as segment objects.

Both draw on their own rate (``--bulk-rate`` jobs/s, shared) and sizes of
``--bulk-min``..``--bulk-max`` jobs, and respect ``--max-backlog`` as the single
pushes do. Payloads are ``{"p": P, "n": N}``, unique per run: P is 100 + i for
bulk producer i and 200 + i for publisher i (single-push producers use 0..99).

* :func:`bulk_push`: one ``QueueClient.push_many`` request of the whole batch (its
  request key makes the client's retries safe). No re-push after a failure: the
  jobs count as attempted (they may or may not be in the queue).
* :func:`publish`: what a Spark write does (:mod:`osqueue_spark.datasource.writer`
  and ``stream_writer``): stage 2-4 chunks under write ids below one prefix
  (sometimes a speculative copy of a chunk that is not kept), then ``publish``
  with the once key ``write:PREFIX``, retried by the client as the writer's is.
  When the publish fails for good, the run either replays it as a streaming
  batch would (chunks staged again under new write ids, the same once key: a
  publish that had landed answers ``duplicate: true``) or aborts it as the batch
  writer does (``publish(prefix, [])``). A publish's payloads are acknowledged
  (once, without ids) only when a publish answered success.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from tools.chaos.groups import group_of

if TYPE_CHECKING:
    from osqueue_spark import QueueClient
    from tools.chaos.clients import Workers

#: first payload "p" of the bulk producers and of the publishers
BULK_P, PUBLISH_P = 100, 200
#: how many times a failed publish is replayed at most before it is aborted
MAX_REPLAYS = 3


def _batch(workers: Workers, rng: random.Random) -> int | None:
    """Wait for the backlog and the bulk rate; the size of the next batch, or None
    once producers stop."""
    args, rec = workers.args, workers.rec
    while rec.backlog() > args.max_backlog and not workers.stop_producing.wait(0.2):
        pass
    n = rng.randint(args.bulk_min, args.bulk_max)
    if not workers.bulk_limiter.wait(n, workers.stop_producing):
        return None
    return n


def bulk_push(workers: Workers, i: int) -> None:
    """Bulk producer ``i``: push batches of bare payloads, each in one request."""
    args, rec = workers.args, workers.rec
    rng = random.Random(f"{args.seed}-bulk-{i}")
    grng = random.Random(f"{args.seed}-bulk-groups-{i}")
    p = BULK_P + i
    client = workers.client(args.producers + args.consumers + i)
    counter = 0
    try:
        while not workers.stop_producing.is_set():
            n = _batch(workers, rng)
            if n is None:
                break
            batch = [{"p": p, "n": counter + j} for j in range(n)]
            counter += n
            pkeys = [f"{p}:{job['n']}" for job in batch]
            # with --groups each job gets its group (a grouped push goes into the head,
            # or into grouped segments with --grouped-segments)
            bodies: list[Any] = batch if args.groups <= 0 else [
                {"payload": pl, "group": group_of(grng, args.groups, args.group_skew)}
                for pl in batch]
            started = rec.clock()
            try:
                ids = client.push_many(bodies, batch_size=n)
            except Exception as exc:
                rec.error("bulk_push", exc)
                rec.push_failed(pkeys, exc)
                time.sleep(rng.uniform(0.05, 0.3))
                continue
            if len(ids) != n:
                rec.anomaly("bulk_push_ids", jobs=n, ids=len(ids), first=pkeys[0])
                rec.push_failed(pkeys)
                continue
            rec.pushed(pkeys, list(ids), started)
            rec.grouped_pushed(bodies)
            with rec.lock:
                rec.counts["bulk_push_ok"] += 1
                rec.counts["jobs_acked_by_bulk_push"] += n
    finally:
        client.close()


def _split(n: int, parts: int, rng: random.Random) -> list[int]:
    """``n`` as ``parts`` positive sizes."""
    cuts = sorted(rng.sample(range(1, n), parts - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]


def publish(workers: Workers, i: int) -> None:
    """Publisher ``i``: stage chunks and publish them once, as a Spark write does."""
    args = workers.args
    rng = random.Random(f"{args.seed}-publish-{i}")
    p = PUBLISH_P + i
    client = workers.client(args.producers + args.consumers + args.bulk_producers + i)
    counter = 0
    write = 0
    try:
        while not workers.stop_producing.is_set():
            n = _batch(workers, rng)
            if n is None:
                break
            payloads = [{"p": p, "n": counter + j} for j in range(n)]
            counter += n
            chunks, at = [], 0
            for size in _split(n, min(rng.randint(2, 4), n), rng):
                chunks.append(payloads[at:at + size])
                at += size
            prefix = f"{workers.run_tag}-pub{i}-w{write}/"
            write += 1
            _publish_write(workers, client, prefix, chunks, rng)
    finally:
        client.close()


def _stage(workers: Workers, client: QueueClient, start: str,
           chunks: list[list[dict[str, Any]]]) -> list[str] | None:
    """Stage each chunk under write id ``start`` + ``cN``; their write ids, or None
    if one failed (a failed task: the batch fails, a replay stages again)."""
    keep = []
    for c, chunk in enumerate(chunks):
        write_id = f"{start}c{c}"
        try:
            client.stage(write_id, chunk)
        except Exception as exc:
            workers.rec.error("stage", exc)
            return None
        keep.append(write_id)
    return keep


def _publish_write(workers: Workers, client: QueueClient, prefix: str,
                   chunks: list[list[dict[str, Any]]], rng: random.Random) -> None:
    """Stage ``chunks`` under ``prefix`` and publish them once (see the module
    docstring): replayed after a failure up to :data:`MAX_REPLAYS` times, or
    aborted."""
    rec = workers.rec
    once = f"write:{prefix}"
    pkeys = [f"{job['p']}:{job['n']}" for chunk in chunks for job in chunk]
    for round_ in range(MAX_REPLAYS + 1):
        if round_:
            with rec.lock:
                rec.counts["publish_replays"] += 1
        keep = _stage(workers, client, f"{prefix}r{round_}-", chunks)
        if keep is not None:
            if rng.random() < 0.3:  # a speculative attempt of chunk 0 that lost the race
                try:
                    client.stage(f"{prefix}r{round_}-c0-spec", chunks[0])
                    with rec.lock:
                        rec.counts["speculative_chunks"] += 1
                except Exception as exc:
                    rec.error("stage", exc)
            started = rec.clock()
            try:
                out = client.publish(prefix, keep, once=once)
            except Exception as exc:
                rec.error("publish", exc)
                rec.publish_failed(pkeys, exc)
            else:
                duplicate = bool(out.get("duplicate"))
                if not duplicate and out.get("published") != len(pkeys):
                    rec.anomaly("publish_count", prefix=prefix, jobs=len(pkeys),
                                answer=out)
                    rec.publish_failed(pkeys, None)
                    return
                rec.published(pkeys, started, duplicate)
                return
        if workers.stop_producing.is_set() or rng.random() < 0.5:
            break  # the batch writer's way: abort
        time.sleep(rng.uniform(0.2, 1.0))
    # Abort: drop every chunk of the write. A publish that landed stays (its payloads
    # were recorded as attempted); payloads whose stage failed in every round were
    # never in a publish and must not appear.
    try:
        client.publish(prefix, [])
        with rec.lock:
            rec.counts["publish_aborted"] += 1
    except Exception as exc:
        rec.error("abort", exc)
