"""moto's S3 API on 127.0.0.1, shared by the tests and the benchmark / chaos scripts.

In-process (a thread)::

    server = MotoServer(); server.start(); ...; server.stop()

As its own process (prints ``motoserver ready on http://127.0.0.1:PORT`` on
stderr once it accepts requests; ``--bucket`` creates buckets first)::

    python -m tests.support.motoserver [--port 0] [--bucket NAME ...]

moto checks ``If-Match`` without holding a lock, so a threaded server lets two
conditional writers both win; this server handles ONE request at a time
(werkzeug, ``threaded=False``, HTTP/1.0: one request per connection), which
makes its compare-and-set honest.
"""

from __future__ import annotations

import argparse
import os
import sys

from tests.support.serving import StopSignals, ThreadedServer

DEFAULT_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def set_default_credentials() -> None:
    """Fake AWS credentials and region for moto, unless the environment has some."""
    for name, value in DEFAULT_CREDENTIALS.items():
        os.environ.setdefault(name, value)


class MotoServer(ThreadedServer):
    """moto's S3 app served by a NON-threaded werkzeug server.

    moto checks If-Match without holding a lock, so a threaded server lets two
    conditional writers both win; serving one request at a time makes its
    compare-and-set honest, which race tests need.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        app = DomainDispatcherApplication(create_backend_app)
        super().__init__(make_server(host, port, app, threaded=False,
                                     request_handler=MotoRequestHandler), "motoserver")
        self.endpoint = f"http://{host}:{self.port}"

    def create_bucket(self, name: str) -> None:
        """Create a bucket (region us-east-1) on this server."""
        create_bucket(self.endpoint, name)


def create_bucket(endpoint: str, name: str) -> None:
    """Create bucket ``name`` on the S3 API at ``endpoint`` (path-style, us-east-1)."""
    import boto3

    set_default_credentials()
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    try:
        client.create_bucket(Bucket=name)
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.motoserver", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="TCP port (0: a free one)")
    p.add_argument("--bucket", action="append", default=[], help="create this bucket first")
    p.add_argument("--access-log", action="store_true",
                   help="log every request (werkzeug's access log) on stderr")
    args = p.parse_args(argv)
    set_default_credentials()
    if not args.access_log:
        import logging

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = MotoServer(args.host, args.port)
    stop = StopSignals()
    server.start()
    for bucket in args.bucket:
        server.create_bucket(bucket)
    print(f"motoserver ready on {server.endpoint}", file=sys.stderr, flush=True)
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
