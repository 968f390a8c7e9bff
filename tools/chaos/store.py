"""The store of a run: a directory, a moto S3 server or our GCS test server
(tests/support/gcsserver.py) behind the fault proxy (with its remote control), or Azurite, and the
runner's own direct reads of it: the queue object, its job counts by status and, for
post-mortems, a copy of every object."""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from broker import paths
from broker.errors import NotFound
from broker.storage import ObjectStore, store_from_url
from tools.chaos.children import CHILDREN, child_env, log_tail, wait_for_line

#: the one queue every run uses
QUEUE = "chaos"


class StoreSetup:
    """Where brokers write (``broker_url``) and where the runner reads (``direct_url``)."""

    def __init__(self, args: argparse.Namespace, run_dir: Path) -> None:
        self.kind = args.store
        self.args = args
        self.run_dir = run_dir
        self.broker_url = ""
        self.direct_url = ""
        self.proxy_url: str | None = None
        self._control: Any = None
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """Make the store: a directory, or moto (s3) or the GCS test server (gcs) and
        the fault proxy (each given 60 s to print 'ready'; faults off until
        :meth:`faults`)."""
        if self.kind == "file":
            path = self.run_dir / "store"
            path.mkdir(parents=True, exist_ok=True)
            self.broker_url = self.direct_url = f"file://{path}"
            return
        if self.kind == "azure":
            self._start_azurite()
            return
        from tests.support.faultproxy import RemoteControl

        bucket = f"osq-chaos-{self.args.seed % 100000}-{uuid.uuid4().hex[:8]}"
        env = child_env()
        # gcs: uploads are POSTs (a resumable upload ends with a PUT), and may be dropped
        server, scheme, drop = (("gcsserver", "gs", "POST,PUT") if self.kind == "gcs"
                                else ("motoserver", "s3", "PUT"))
        moto_log = self.run_dir / ("gcsserver.log" if self.kind == "gcs" else "moto.log")
        moto = CHILDREN.spawn([sys.executable, "-m", f"tests.support.{server}", "--bucket", bucket],
                              moto_log, env)
        self.procs.append(moto)
        m = wait_for_line(moto, moto_log, 0, re.compile(server + r" ready on (http://\S+)"),
                          60)
        if m is None:
            raise RuntimeError(f"{server} did not start: {log_tail(moto_log)}")
        moto_url = m.group(1)
        proxy_log = self.run_dir / "faultproxy.log"
        proxy = CHILDREN.spawn(
            [sys.executable, "-m", "tests.support.faultproxy", "--upstream", moto_url,
             "--seed", str(self.args.seed), "--rate", str(self.args.fault_rate),
             "--weights", self.args.fault_weights, "--delay-s", str(self.args.fault_delay_s),
             "--delay-then", self.args.fault_delay_then, "--disabled", "--drop-methods", drop,
             "--log-requests", str(self.run_dir / f"{self.kind}-requests.jsonl")],
            proxy_log, env)
        self.procs.append(proxy)
        m = wait_for_line(proxy, proxy_log, 0, re.compile(r"faultproxy ready on (http://\S+)"),
                          60)
        if m is None:
            raise RuntimeError(f"fault proxy did not start: {log_tail(proxy_log)}")
        self.proxy_url = m.group(1)
        self._control = RemoteControl(self.proxy_url)
        self.broker_url = f"{scheme}://{bucket}/chaos?endpoint={self.proxy_url}"
        self.direct_url = f"{scheme}://{bucket}/chaos?endpoint={moto_url}"

    def _start_azurite(self) -> None:
        """Azurite (node, spawned directly so that kill_all reaches it) with its
        workspace in the run directory, given 60 s to answer; brokers, clients and the
        runner get its connection string through AZURE_STORAGE_CONNECTION_STRING (the
        key is random per run and never on a command line). No fault proxy: the
        faults are the nemesis's kills, pauses and competitors."""
        from tests.support.azuriteserver import AzuriteServer, wait_until_serving

        server = AzuriteServer()
        workspace = self.run_dir / "azurite"
        workspace.mkdir(parents=True, exist_ok=True)
        log = self.run_dir / "azurite.log"
        proc = CHILDREN.spawn(server.argv(str(workspace)), log,
                              {**child_env(), **server.env()})
        self.procs.append(proc)
        try:
            wait_until_serving(server.host, server.port, 60, proc)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {log_tail(log)}") from None
        os.environ["AZURE_STORAGE_CONNECTION_STRING"] = server.connection_string
        container = f"osq-chaos-{self.args.seed % 100000}-{uuid.uuid4().hex[:8]}"
        server.create_container(container)
        self.broker_url = self.direct_url = f"az://{container}/chaos"

    def faults(self, on: bool) -> None:
        """Turn the proxy's faults on or off (nothing for a file store)."""
        if self._control is not None:
            self._control.set_enabled(on)

    def fault_stats(self) -> dict[str, Any] | None:
        """The proxy's request and fault counts (None for a file store)."""
        if self._control is None:
            return None
        try:
            out: dict[str, Any] = self._control.stats()
            return out
        except OSError as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    def stop(self) -> None:
        """Stop moto and the proxy, or Azurite: SIGTERM, kill -9 after 10 s."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)


def open_store(url: str) -> ObjectStore:
    """The store at ``url``, for the runner's own reads."""
    return store_from_url(url)


def read_state_raw(store: ObjectStore) -> dict[str, Any] | None:
    """The queue object as plain JSON, or None if it does not exist yet."""
    try:
        raw: dict[str, Any] = orjson.loads(store.read(paths.state_key(QUEUE)).data)
        return raw
    except NotFound:
        return None


def status_counts(store: ObjectStore) -> dict[str, int] | None:
    """How many jobs of the queue object (and its segments) have each status; None if
    it does not exist. Read leniently, so that a newer head still drains: the jobs
    of spill objects (by their references' ``count`` and ``taken`` where given,
    else ``spill_refs``: how many references) and ``claim_records`` (a version-5
    head's ``claims``)."""
    raw = read_state_raw(store)
    if raw is None:
        return None
    counts: collections.Counter[str] = collections.Counter(j.get("status")
                                                           for j in raw.get("jobs", []))
    for ref in raw.get("segments", []):  # (version 4: pending jobs held by segments)
        counts["pending"] += ref["count"] - ref["taken"]
    for ref in raw.get("spills", []):  # (version 5: failed and dead jobs out of the head)
        if isinstance(ref, dict) and isinstance(ref.get("count"), int):
            kind = paths.parse_spill_key(str(ref.get("key", "")))
            counts["dead" if kind is not None and kind[1] == "dead" else "pending"] += \
                ref["count"] - int(ref.get("taken") or 0)
        else:
            counts["spill_refs"] += 1
    claims = raw.get("claims")  # (version 5: claim records; none once drained)
    if isinstance(claims, list) and claims:
        counts["claim_records"] = len(claims)
    return dict(counts)


def dump_store(store: ObjectStore, into: Path) -> int:
    """Copy every object of ``store`` to files under ``into``; how many."""
    object_keys = store.list("")

    def copy(key: str) -> None:
        path = into.joinpath(*key.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get(key))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(copy, object_keys))
    return len(object_keys)
