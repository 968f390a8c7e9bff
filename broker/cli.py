"""``osqueue-broker`` / ``python -m broker``: run a broker over a store.

Example::

    osqueue-broker --store file:///var/lib/osqueue --listen 0.0.0.0:8765
    OSQ_TOKEN=... osqueue-broker --store s3://bucket/queues --listen :8765 --token-env OSQ_TOKEN

Exit status: 0 after a clean drain, 2 for bad arguments or a store or queue
object it refuses to run on (the message says why; nothing was written).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from broker import logs
from broker.errors import OsqueueError
from broker.gcpause import tune_for_broker_process
from broker.server import BrokerServer
from broker.service import BrokerConfig
from broker.storage import store_from_url

log = logging.getLogger("osqueue.cli")


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--listen wants HOST:PORT, got {text!r}")
    return (host.strip("[]") or "0.0.0.0"), int(port)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="osqueue-broker", description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True, help="file:///abs/dir or s3://bucket/prefix")
    p.add_argument("--listen", type=parse_listen, default=("127.0.0.1", 8765),
                   help="HOST:PORT to listen on (port 0 picks a free one)")
    p.add_argument("--advertise-url", help="URL clients should use (default from --listen)")
    p.add_argument("--token-env", help="name of an environment variable holding the bearer token")
    p.add_argument("--endpoint-url", help="S3-compatible endpoint (else AWS_ENDPOINT_URL)")
    p.add_argument("--lease-s", type=float, default=30.0,
                   help="broker lease in seconds: other brokers on the store take a queue over "
                        "when its owner wrote nothing for this long")
    p.add_argument("--commit-timeout-s", type=float, default=30.0,
                   help="how long one batch waits on failing storage before its callers are "
                        "answered (outcome_unknown or storage_unavailable)")
    p.add_argument("--max-request-mb", type=float, default=64.0, help="request body limit, MiB")
    p.add_argument("--no-self-test", action="store_true",
                   help="skip the conditional-write self-test at start-up")
    p.add_argument("--log-level", default="info")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.setup(args.log_level)
    tune_for_broker_process()  # this process exists to run a broker: GC tuned for it
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            print(f"osqueue-broker: environment variable {args.token_env} is empty or unset",
                  file=sys.stderr)
            return 2
    host, port = args.listen
    try:
        store = store_from_url(args.store, endpoint_url=args.endpoint_url)
        if not 0.5 <= args.lease_s <= 3600 or not 0.1 <= args.commit_timeout_s <= 3600:
            print("osqueue-broker: --lease-s must be within [0.5, 3600] and "
                  "--commit-timeout-s within [0.1, 3600]", file=sys.stderr)
            return 2
        config = BrokerConfig(lease_s=args.lease_s, self_test=not args.no_self_test,
                              commit_timeout_s=args.commit_timeout_s,
                              max_request_bytes=int(args.max_request_mb * 1024 * 1024))
        server = BrokerServer(
            store, host, port, token=token, config=config, advertise_url=args.advertise_url,
            on_ready=lambda s: print(f"osqueue-broker {s.broker.id} ready on {s.url} "
                                     f"(store {store.url})", file=sys.stderr, flush=True))
        server.run()
    except OsqueueError as exc:
        print(f"osqueue-broker: refusing to start: {exc.message} [{exc.code}]", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"osqueue-broker: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
