"""``osqueue-broker`` / ``python -m broker``: run a broker over a store.

Example::

    osqueue-broker --store file:///var/lib/osqueue
    OSQ_TOKEN=... osqueue-broker --store s3://bucket/queues --listen :8765 --token-env OSQ_TOKEN \
        --advertise-url http://broker.internal:8765
    OSQUEUE_STORE=s3://bucket/queues OSQUEUE_TOKEN=... osqueue-broker --listen 0.0.0.0:8765

Listening beyond loopback needs a bearer token (``--insecure-no-token`` to go
without, on a trusted network only). ``--advertise-url`` is the URL clients
and other brokers reach this one at; it is written into the queue objects it
owns (default: from ``--listen``, a wildcard address giving this host's name's
address).

Every flag may come from an ``OSQUEUE_*`` variable instead (see :mod:`broker.config`);
a flag wins over its variable.

Exit status: 0 after a clean drain, 2 for bad arguments or a store or queue
object it refuses to run on (the message says why; nothing was written).
"""

from __future__ import annotations

import argparse
import logging
import sys

from pydantic import ValidationError

from broker import logs
from broker.config import BrokerSettings, env_of, problems
from broker.errors import OsqueueError
from broker.gcpause import tune_for_broker_process
from broker.http.server import BrokerServer
from broker.storage import store_from_url

log = logging.getLogger("osqueue.cli")


def build_parser() -> argparse.ArgumentParser:
    """The flags; each leaves its field unset unless given, so its variable applies."""
    p = argparse.ArgumentParser(prog="osqueue-broker", description=__doc__.splitlines()[0],
                                argument_default=argparse.SUPPRESS)
    fields = BrokerSettings.model_fields
    for name in ("store", "listen", "advertise_url", "token_env", "endpoint_url", "lease_s",
                 "commit_timeout_s", "max_request_mb", "header_timeout_s", "body_timeout_s",
                 "max_connections", "log_level"):
        field = fields[name]
        default = "" if field.is_required() or field.default is None else \
            f"; default {field.default}"
        p.add_argument("--" + name.replace("_", "-"), dest=name, metavar=name.upper(),
                       help=f"{field.description or name} (env {env_of(name)}{default})")
    p.add_argument("--insecure-no-token", dest="insecure_no_token", action="store_const",
                   const=True, help=f"listen beyond loopback without a bearer token, on a "
                                    f"trusted network only (env {env_of('insecure_no_token')}"
                                    f"=true)")
    p.add_argument("--no-self-test", dest="self_test", action="store_const", const=False,
                   help=f"skip the conditional-write self-test at start-up "
                        f"(env {env_of('self_test')}=false)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tune_for_broker_process()  # this process exists to run a broker: GC tuned for it
    try:
        settings = BrokerSettings.load(vars(args))
    except ValidationError as exc:
        for line in problems(exc):
            print(f"osqueue-broker: {line}", file=sys.stderr)
        return 2
    logs.setup(settings.log_level)
    host, port = settings.host, settings.port
    try:
        store = store_from_url(settings.store, endpoint_url=settings.endpoint_url)
        server = BrokerServer(
            store, host, port, token=settings.bearer(), config=settings.broker_config(),
            advertise_url=settings.advertise_url,
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
