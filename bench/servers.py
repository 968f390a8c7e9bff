"""Servers for the broker benchmark, each printing "ready on URL" once it accepts requests.

    python bench/servers.py broker --store file:///tmp/x [--write-latency-ms 200]
    python bench/servers.py noop

``--write-latency-ms`` wraps the store so every write (conditional writes,
archive and staging objects, deletes) sleeps first: an injected
object-storage latency; nothing else changes.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

# OSQ_BENCH_ROOT: serve another checkout's broker package with these same servers
# (broker_bench.py --baseline), so only the broker differs between the two.
sys.path.insert(0, os.environ.get("OSQ_BENCH_ROOT") or str(Path(__file__).resolve().parent.parent))

from broker.storage import Data, FileStore, ObjectStore, store_from_url

try:
    from broker.http.server import BrokerServer
    from broker.service.config import BrokerConfig
except ImportError:
    try:  # a baseline from before service/settings.py was named config.py
        BrokerServer = importlib.import_module("broker.http.server").BrokerServer
        BrokerConfig = importlib.import_module("broker.service.settings").BrokerConfig
    except ImportError:  # a baseline from before broker/ had sub-packages (flat modules)
        BrokerServer = importlib.import_module("broker.server").BrokerServer
        BrokerConfig = importlib.import_module("broker.service").BrokerConfig


class SlowWrites(FileStore):
    """A file store whose every write (CAS writes, archive and staging puts,
    deletes) takes at least ``latency_s``, like an S3 PUT."""

    def __init__(self, root: str, latency_s: float) -> None:
        super().__init__(root)
        self.latency_s = latency_s

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        time.sleep(self.latency_s)
        return super().write_if_match(key, data, etag)

    def create_if_absent(self, key: str, data: Data) -> str:
        time.sleep(self.latency_s)
        return super().create_if_absent(key, data)

    def put(self, key: str, data: bytes) -> str:
        time.sleep(self.latency_s)
        return super().put(key, data)

    def delete(self, key: str) -> None:
        time.sleep(self.latency_s)
        super().delete(key)


def noop_server() -> None:
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def noop(request: Request) -> Response:
        await request.body()
        return Response(b'{"ok":true}', media_type="application/json")

    app = Starlette(routes=[Route("/noop", noop, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    print(f"ready on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["broker", "noop"])
    p.add_argument("--store")
    p.add_argument("--write-latency-ms", type=float, default=0.0)
    args = p.parse_args()
    if args.kind == "noop":
        noop_server()
        return
    store: ObjectStore
    if args.write_latency_ms > 0:
        store = SlowWrites(args.store.removeprefix("file://"), args.write_latency_ms / 1000)
    else:
        store = store_from_url(args.store)
    # a broker's own process, as `python -m broker` is; a --baseline checkout
    # without tune_for_broker_process tuned GC inside BrokerServer.serve
    tune = getattr(importlib.import_module("broker.gcpause"), "tune_for_broker_process", None)
    if tune is not None:
        tune()
    server = BrokerServer(store, "127.0.0.1", 0, config=BrokerConfig(self_test=False),
                          on_ready=lambda s: print(f"ready on {s.url}", file=sys.stderr,
                                                   flush=True))
    server.run()


if __name__ == "__main__":
    main()
