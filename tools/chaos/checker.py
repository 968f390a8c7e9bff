"""The total-queue check: the store itself (the queue object, the segment and spill
objects it references and every archive object, read directly) against what the
clients were told. Its figures (each with samples naming the jobs or objects): lost,
duplicated, unexpected, superseded, double, ids acknowledged for two payloads, ack
conflicts, archived and still queued, stale answers for completions that landed,
job objects (segments, spill objects) left behind unreferenced, any job object left
once the queue is drained, claim records left in the head; the runner fails on any of
them (:data:`FAILURES`). Beside them: the jobs that died and were redriven, and how
many of them ended completed.

The head is decoded by :mod:`broker.model.format.decode` (whatever version it is),
and read as plain JSON for what a newer format adds (``"spills"``, ``"claims"``):
the check needs no lease on a job line."""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import orjson

from broker import paths
from broker.errors import NotFound, OsqueueError
from broker.model.format import archive, segment_format
from broker.model.format.decode import decode_state
from broker.model.held import job_at, segment_slices
from broker.model.segments.refs import pending_lines
from broker.model.state import QueueState
from broker.model.tokens import stored_part
from broker.storage import ObjectStore
from tools.chaos.clients import Completion, Recorder, payload_key
from tools.chaos.store import QUEUE

#: The figures of :func:`check_store` a run fails on, each a count (0: none found).
FAILURES = ("lost", "duplicated", "unexpected", "superseded", "double", "ids_acked_twice",
            "ack_conflicts", "archived_and_queued", "stale_answer_but_landed",
            "segments_left_behind", "objects_left_once_drained", "claim_records_left")


def spill_jobs(store: ObjectStore, raw: dict[str, Any],
               again: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """The jobs of every spill object the head ``raw`` (plain JSON) references in
    its ``"spills"`` list (none before version 5), read leniently so that the
    check does not depend on the spill format's details: every JSON line of the
    object (after a first line with no ``"id"``, its header) that is an object
    with an ``"id"`` is a job, its
    status the ref's ``kind`` (``pending`` for a dead object redriven by
    reference), but those the ref no longer holds: positions before a pending
    ref's ``taken`` (moved into the head by claims) and those taken ``out``;
    of those before ``taken``, the ones a claim record's spill part holds are
    jobs too (``claimed``, or ``completed`` in a done entry awaiting their
    archive: :func:`_spill_parts`). A missing object raises ``NotFound``. The
    id of a job held twice is appended to ``again``."""
    jobs: dict[str, dict[str, Any]] = {}
    parts = _spill_parts(raw)
    for ref in raw.get("spills") or []:
        ref = ref if isinstance(ref, dict) else {"key": str(ref)}
        key = str(ref.get("key"))
        parsed = paths.parse_spill_key(key)
        kind = str(ref.get("kind") or (parsed[1] if parsed is not None else "spilled"))
        skip = set(range(int(ref.get("taken") or 0)))
        for run in ref.get("out") or []:
            skip.update(range(int(run[0]), int(run[0]) + int(run[1])))
        lines = store.get(key).splitlines()
        if lines and b'"id"' not in lines[0]:
            lines = lines[1:]  # (the header: positions count from the line after it)
        for pos, line in enumerate(lines):
            try:
                job = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            status = parts.get((key, pos), kind if pos not in skip else None)
            if status is not None and isinstance(job, dict) and isinstance(job.get("id"), str):
                if again is not None and job["id"] in jobs:
                    again.append(job["id"])
                jobs[job["id"]] = {**job, "status": status}
    return jobs


def _spill_parts(raw: dict[str, Any]) -> dict[tuple[str, int], str]:
    """``(spill object key, position) -> status`` of the jobs the head's claim
    records hold at spill parts (``{"spill": key, "at": runs, "seq": runs}``):
    ``claimed``, or ``completed`` for a position in a done entry; settled
    positions in none are elsewhere (the head's lines, the archive). Lenient:
    a record it cannot read holds nothing here."""
    out: dict[tuple[str, int], str] = {}
    for record in claim_records_of(raw):
        try:
            settled = _expand(record.get("settled") or [])
            done = {p for entry in record.get("done") or [] for p in _expand(entry["pos"])}
            first = 0
            for part in record["parts"]:
                runs = part.get("seq") if "seq" in part else part.get("at")
                count = sum(runs[1::2])
                if "spill" in part:
                    for i, at in enumerate(_expand(part["at"])):
                        pos = first + i
                        if pos not in settled or pos in done:
                            out[(part["spill"], at)] = "completed" if pos in done else "claimed"
                first += count
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return out


def _expand(runs: list[int]) -> set[int]:
    return {v for i in range(0, len(runs), 2) for v in range(runs[i], runs[i] + runs[i + 1])}


def claim_records_of(raw: dict[str, Any] | None) -> list[Any]:
    """The claim records of the head ``raw`` (plain JSON): its ``"claims"`` list
    (version 5; none before, and none once every claimed job is settled)."""
    claims = (raw or {}).get("claims")
    return claims if isinstance(claims, list) else []


def object_refs(raw: dict[str, Any] | None) -> set[str]:
    """The keys of the job objects (segments, spill objects) the head ``raw``
    references, read leniently (a reference is an object with a ``"key"``)."""
    out: set[str] = set()
    for name in ("segments", "spills"):
        for ref in (raw or {}).get(name) or []:
            if isinstance(ref, dict) and "key" in ref:
                out.add(str(ref["key"]))
    return out


def segment_jobs(store: ObjectStore, state: QueueState,
                 again: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """The untaken jobs of every segment ``state`` refers to (id -> the job, plain),
    and those claim records hold there (claimed) or completed (done entries),
    read and checked against their references (``ValueError`` naming the object
    for one missing from the store's answer, truncated or not matching). The id of
    a job held by two segments is appended to ``again``."""
    jobs: dict[str, dict[str, Any]] = {}
    for ref in state.segment_refs:
        got = store.read(ref.key)
        if got.etag != ref.etag:
            raise ValueError(f"segment {ref.key} has etag {got.etag!r}, "
                             f"the queue object refers to {ref.etag!r}")
        held = segment_slices(state, ref)  # (held by claim records, or done awaiting archive)
        start = min(ref.taken, held[0][0]) if held else None
        lines = segment_format.segment_lines(got.data, ref, start)
        plains = [job_at(record, pos, ref, lines[at - (start or 0)]).to_plain()
                  for at, record, pos in held]
        if start is not None:
            lines = lines[ref.taken - start:]
        plains += [segment_format.segment_job(seq, line, ref).to_plain()
                   for seq, line in pending_lines(ref, lines)]
        for plain in plains:
            if again is not None and str(plain["id"]) in jobs:
                again.append(str(plain["id"]))
            jobs[str(plain["id"])] = plain
    return jobs


class _Snapshot:
    """The archive objects of a store, fetched once (in parallel) and served from
    memory to ``broker.model.format.archive``'s readers (they need only ``list`` and ``get``)."""

    def __init__(self, store: ObjectStore) -> None:
        self.url = store.url
        self.keys = archive.list_objects(store, QUEUE)
        with ThreadPoolExecutor(8) as pool:
            self.data = dict(zip(self.keys, pool.map(store.get, self.keys), strict=True))

    def list(self, prefix: str) -> list[str]:
        return [k for k in self.keys if k.startswith(prefix)]

    def get(self, key: str) -> bytes:
        try:
            return self.data[key]
        except KeyError:
            raise NotFound(f"no object {key!r}") from None


def line_token(line: dict[str, Any]) -> str | None:
    """The token a completion was made with, as stored (without the tag a client's
    token carries, see broker.model.tokens): the line's own ``token`` field where the
    archive has one, else the one our consumers put in the result."""
    token = line.get("token")
    if token is None and isinstance(line.get("result"), dict):
        token = line["result"].get("token")
    return None if token is None else stored_part(str(token))


def check_store(store: ObjectStore, rec: Recorder, samples: int = 20) -> dict[str, Any]:
    """The total-queue check: what the store holds against what clients were told.

    The archive is read twice over the same bytes: line by line across every object
    ("raw"), and as ``broker.model.format.archive.read_all`` shows it (the reader's view, which
    may leave out lines it knows to be orphans). Presence, doubles and tokens are
    judged on the reader's view; the raw figures are reported beside them. A job in
    the queue object with status ``completed`` (a layout that archives after the
    commit) counts as completed with its lease's token and worker. Every id a push
    answered is checked, the first of a payload and any other (an ack conflict).
    Segment objects the queue object does not reference are left behind (the
    runner checks once the owner's sweep had its time and the brokers stopped).
    """
    out: dict[str, Any] = {}
    try:
        got = store.read(paths.state_key(QUEUE))
    except NotFound:
        got = None
    queue_jobs: dict[str, dict[str, Any]] = {}  # id -> the job, plain
    twice: list[str] = []  # ids both in the head and a segment, or in two segments
    state: QueueState | None = None
    if got is not None:
        try:
            state = decode_state(got.data)
        except OsqueueError as exc:
            out["state_error"] = str(exc)
            state = None
        if state is not None:
            for stored in state.jobs.values():
                plain = stored.to_plain()
                queue_jobs[str(plain["id"])] = plain
            try:  # the pending jobs the object's segments still hold
                held_by_segments = segment_jobs(store, state, twice)
                twice.extend(sorted(set(held_by_segments) & set(queue_jobs)))
                queue_jobs.update(held_by_segments)
                out["segment_jobs"] = len(held_by_segments)
            except (OsqueueError, ValueError) as exc:
                out["state_error"] = f"a segment of the queue object: {exc}"
            out["segments"] = len(state.segment_refs)
            out["queue_seq"] = state.seq
            out["queue_broker"] = None if state.broker is None else {
                "id": state.broker.id, "url": state.broker.url}
    raw_head: dict[str, Any] | None = None
    if got is not None:
        try:
            raw_head = orjson.loads(got.data)
        except orjson.JSONDecodeError:
            raw_head = None
    if state is not None and raw_head is not None:
        try:  # the failed and dead jobs of spill objects (version 5)
            held_by_spills = spill_jobs(store, raw_head, twice)
            twice.extend(sorted(set(held_by_spills) & set(queue_jobs)))
            queue_jobs.update(held_by_spills)
            out["spill_jobs"] = len(held_by_spills)
        except OsqueueError as exc:
            out["state_error"] = f"a spill object of the queue object: {exc}"
    claim_records = claim_records_of(raw_head)
    referenced = object_refs(raw_head)
    job_objects = sorted({*store.list(paths.segments_prefix(QUEUE)),
                          *store.list(paths.spills_prefix(QUEUE))})
    left_behind = sorted(set(job_objects) - referenced)
    snap = _Snapshot(store)
    raw: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for key in snap.keys:
        for line in archive.decode_records(snap.data[key]):
            raw[str(line.get("id"))].append({**line, "_object": key})
    view: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for line in archive.read_all(cast(Any, snap), QUEUE):
        view[str(line.get("id"))].append(line)
    out["archive_objects"] = len(snap.keys)
    out["archive_lines"] = sum(len(v) for v in raw.values())
    out["archive_lines_read"] = sum(len(v) for v in view.values())
    out["queue_jobs_left"] = dict(collections.Counter(j.get("status")
                                                      for j in queue_jobs.values()))

    # where each job is recorded completed: (token, worker, where)
    done: dict[str, list[tuple[str | None, str | None, str]]] = collections.defaultdict(list)
    for job_id, ls in view.items():
        for line in ls:
            done[job_id].append((line_token(line), line.get("worker"), "archive"))
    for job_id, job in queue_jobs.items():
        if job.get("status") == "completed" and job_id not in view:
            lease = job.get("lease") or {}
            done[job_id].append((lease.get("token"), lease.get("worker"), "queue"))

    # payload -> job ids across queue and archive (reader's view)
    by_payload: dict[str, set[str]] = collections.defaultdict(set)
    held: dict[str, set[str]] = collections.defaultdict(set)  # job id -> payload keys
    foreign: list[dict[str, Any]] = []
    for job_id, job in queue_jobs.items():
        k = payload_key(job.get("payload"))
        if k is None:
            foreign.append({"job": job_id, "where": "queue", "payload": str(job)[:200]})
        else:
            by_payload[k].add(job_id)
            held[job_id].add(k)
    for job_id, ls in view.items():
        for line in ls:
            k = payload_key(line.get("payload"))
            if k is None:
                foreign.append({"job": job_id, "where": "archive",
                                "payload": str(line.get("payload"))[:200]})
            else:
                by_payload[k].add(job_id)
                held[job_id].add(k)

    by_job: dict[str, list[Completion]] = collections.defaultdict(list)
    for c in rec.completions:
        by_job[c.job_id].append(c)

    def history(job_id: str) -> dict[str, Any]:
        """What the clients saw of one job (claims, complete answers) and where the
        store holds it."""
        return {"claims": [{"token": t, "worker": w, "t": round(at, 3)}
                           for t, w, at in rec.claims.get(job_id, [])],
                "completes": [{"token": c.token, "ok": c.ok, "reason": c.reason,
                               "t": round(c.t, 3), "late": c.late}
                              for c in by_job.get(job_id, [])],
                "queue_status": (queue_jobs.get(job_id) or {}).get("status"),
                "archive_objects": [ln["_object"] for ln in raw.get(job_id, [])]}

    acked, attempted, published = rec.acked, rec.attempted, rec.acked_published
    acks = rec.acknowledgements()  # (payload, id): the first id of each payload, and more
    acked_ids: dict[str, set[str]] = collections.defaultdict(set)
    payloads_of: dict[str, set[str]] = collections.defaultdict(set)
    for k, i in acks:
        acked_ids[k].add(i)
        payloads_of[i].add(k)
    # lost: acknowledged, and no job with that id holds that payload anywhere (a
    # publish answers no ids: no job holds that payload)
    lost = [{"payload": k, "id": i, "acked_t": round(rec.acked_t.get(k, -1.0), 3),
             **history(i)}
            for k, i in acks if k not in held.get(i, set())]
    lost += [{"payload": k, "id": None, "published": True,
              "acked_t": round(rec.acked_t.get(k, -1.0), 3)}
             for k in published if k not in by_payload and k not in acked]
    # one id answered for pushes of different payloads: at most one of them can be it
    ids_twice = {i: sorted(ks) for i, ks in payloads_of.items() if len(ks) > 1}
    # every job of the queue that is not completed yet (dead ones too: the drain
    # redrives them)
    unfinished = sorted(i for i in {*(i for _, i in acks),
                                    *(i for k in published for i in by_payload.get(k, ()))}
                        if (queue_jobs.get(i) or {}).get("status") not in (None, "completed"))
    # once the queue holds no job and no claim, no job object may be left at all
    drained = state is not None and not claim_records and not any(
        j.get("status") != "completed" for j in queue_jobs.values())
    objects_left = job_objects if drained else []
    # the jobs that died (a fail answered "dead"), and those redriven by id: how many
    # ended completed in the archive
    died_done = sorted(i for i in rec.died if i in view)
    redriven_done = sorted(i for i in rec.redriven if i in view)
    # duplicated: one payload, several jobs
    dup = {k: sorted(ids) for k, ids in by_payload.items() if len(ids) > 1}
    # unexpected: never pushed, or not under an acknowledged id
    never_pushed = [{"payload": k, "jobs": sorted(ids)} for k, ids in by_payload.items()
                    if k not in acked and k not in published and k not in attempted]
    wrong_id = [{"payload": k, "acked_ids": sorted(acked_ids[k]), "jobs": sorted(ids)}
                for k, ids in by_payload.items() if k in acked and ids - acked_ids[k]]
    # double: one job id on several archive lines, as the reader shows them (and raw)
    double = {i: [{"worker": ln.get("worker"), "token": line_token(ln),
                   "completed_at": ln.get("completed_at")} for ln in ls]
              for i, ls in view.items() if len(ls) > 1}
    double_raw = {i: [{"object": ln["_object"], "worker": ln.get("worker"),
                       "token": line_token(ln), "completed_at": ln.get("completed_at")}
                      for ln in ls]
                  for i, ls in raw.items() if len(ls) > 1}
    both = sorted(i for i in view if (queue_jobs.get(i) or {}).get("status")
                  not in (None, "completed"))
    # superseded: an ok complete whose token is not the one the job was completed with
    superseded: dict[str, list[dict[str, Any]]] = {"other_token": [], "still_queued": [],
                                                   "vanished": []}
    stale_but_landed = []
    for c in rec.completions:
        records = done.get(c.job_id, [])
        tokens = {t for t, _, _ in records}
        token = stored_part(c.token)  # the archive and the object keep the stored token
        if c.ok:
            entry = {"job": c.job_id, "token": c.token, "worker": c.worker, "t": round(c.t, 3),
                     "late": c.late}
            if not records:
                kind = "still_queued" if c.job_id in queue_jobs else "vanished"
                superseded[kind].append({**entry, **history(c.job_id)})
            elif token not in tokens or c.worker not in {w for _, w, _ in records}:
                superseded["other_token"].append(
                    {**entry, "recorded": [{"token": t, "worker": w, "where": where}
                                           for t, w, where in records]})
        elif token in tokens:
            stale_but_landed.append({"job": c.job_id, "token": c.token, "reason": c.reason})
    n_sup = sum(len(v) for v in superseded.values())
    out.update({
        "acked": len(acked) + len(published - set(acked)),
        "ids_acked_twice": len(ids_twice),
        "segments_left_behind": len(left_behind),
        "objects_left_once_drained": len(objects_left),
        "claim_records_left": len(claim_records),
        "died": len(rec.died),
        "died_then_completed": len(died_done),
        "redriven_by_id": len(rec.redriven),
        "redriven_by_id_then_completed": len(redriven_done),
        "acked_by_push": len(acked),
        "acked_by_publish": len(published),
        "acked_unfinished": len(unfinished),
        "attempted_not_acked": len(attempted),
        "lost": len(lost),
        "duplicated": sum(len(ids) - 1 for ids in dup.values()) + len(twice),
        "duplicated_payloads": len(dup),
        "held_twice_by_head_and_segments": len(twice),
        "unexpected": len(foreign) + len(never_pushed) + len(wrong_id),
        "unexpected_detail": {"foreign_payload": len(foreign), "never_pushed": len(never_pushed),
                              "wrong_id": len(wrong_id)},
        "superseded": n_sup,
        "superseded_detail": {k: len(v) for k, v in superseded.items()},
        "double": len(double),
        "double_raw_lines": len(double_raw),
        "archived_and_queued": len(both),
        "stale_answer_but_landed": len(stale_but_landed),
        "ack_conflicts": len(rec.ack_conflicts),
        "samples": {
            "lost": lost[:samples],
            "acked_unfinished": unfinished[:samples],
            "duplicated": dict(list(dup.items())[:samples]),
            "held_twice_by_head_and_segments": twice[:samples],
            "foreign_payload": foreign[:samples],
            "never_pushed": never_pushed[:samples],
            "wrong_id": wrong_id[:samples],
            "superseded": {k: v[:samples] for k, v in superseded.items()},
            "double": {i: {"lines": v, **history(i)}
                       for i, v in list(double.items())[:samples]},
            "double_raw_lines": dict(list(double_raw.items())[:samples]),
            "archived_and_queued": both[:samples],
            "stale_answer_but_landed": stale_but_landed[:samples],
            "ack_conflicts": rec.ack_conflicts[:samples],
            "ids_acked_twice": dict(list(ids_twice.items())[:samples]),
            "segments_left_behind": left_behind[:samples],
            "objects_left_once_drained": objects_left[:samples],
            "claim_records_left": [str(r)[:300] for r in claim_records[:samples]],
            "died_not_completed": sorted(rec.died - set(died_done))[:samples],
        },
    })
    return out
