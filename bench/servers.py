"""Servers for the broker benchmark, each printing "ready on URL" once it accepts requests.

    python bench/servers.py broker --store file:///tmp/x [--write-latency-ms 200]
    python bench/servers.py noop

``--write-latency-ms`` wraps the store so every conditional write sleeps
first (an injected object-storage latency); nothing else changes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.server import BrokerServer
from broker.service import BrokerConfig
from broker.storage import FileStore, ObjectStore, store_from_url


class SlowWrites(FileStore):
    """A file store whose CAS writes take at least ``latency_s`` (like S3 PUTs)."""

    def __init__(self, root: str, latency_s: float) -> None:
        super().__init__(root)
        self.latency_s = latency_s

    def write_if_match(self, key: str, data: bytes, etag: str) -> str:
        time.sleep(self.latency_s)
        return super().write_if_match(key, data, etag)

    def create_if_absent(self, key: str, data: bytes) -> str:
        time.sleep(self.latency_s)
        return super().create_if_absent(key, data)


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
    server = BrokerServer(store, "127.0.0.1", 0, config=BrokerConfig(self_test=False),
                          on_ready=lambda s: print(f"ready on {s.url}", file=sys.stderr,
                                                   flush=True))
    server.run()


if __name__ == "__main__":
    main()
