r"""``osqueue-broker`` / ``python -m broker``: run a broker over a store.

Example::

    osqueue-broker --store file:///var/lib/osqueue
    OSQ_TOKEN=... osqueue-broker --store s3://bucket/queues --listen :8765 --token-env OSQ_TOKEN \
        --advertise-url http://broker.internal:8765
    OSQUEUE_STORE=s3://bucket/queues OSQUEUE_TOKEN=... osqueue-broker --listen 0.0.0.0:8765

Listening beyond loopback needs a bearer token (``--insecure-no-token`` to go
without, on a trusted network only). The web dashboard is at ``URL/ui/``: the
same token signs in to it, and without one it answers this machine only
(``--ui-read-only`` hides and refuses its actions). ``--advertise-url`` is the URL clients
and other brokers reach this one at; it is written into the queue objects it
owns (default: from ``--listen``, a wildcard address giving this host's name's
address).

Every flag may come from an ``OSQUEUE_*`` variable instead (see :mod:`broker.flags`);
a flag wins over its variable.

Start-up retries transient storage errors (throttling, 5xx, timeouts, connection
errors), logging each retry, for ``--startup-timeout-s`` (default 60); errors that
will not go away (a missing bucket, denied access, a failed self-test, a corrupt
or newer queue object) stop it at once.

Exit status: 0 after a clean drain; 2 for bad arguments, a store it cannot open
or refuses to run on (its self-test failed, a queue object it will not load), a
store that kept failing for the whole start-up time, or an address it cannot
listen on, each said in one line naming which (nothing was written); 1 if the
store failed after it served.
"""

from __future__ import annotations

import argparse
import logging
import sys

from pydantic import ValidationError

from broker import logs
from broker.display import plain, printable
from broker.errors import OsqueueError
from broker.flags import BrokerFlags, env_of, problems
from broker.gcpause import tune_for_broker_process
from broker.http.server import BrokerServer
from broker.storage import shown_url, store_from_url

log = logging.getLogger("osqueue.cli")


def build_parser() -> argparse.ArgumentParser:
    """The flags; each leaves its field unset unless given, so its variable applies."""
    doc = plain(__doc__ or "").splitlines()
    p = argparse.ArgumentParser(prog="osqueue-broker", description=doc[0],
                                epilog="\n".join(doc[2:]), argument_default=argparse.SUPPRESS,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    fields = BrokerFlags.model_fields
    for name in ("store", "listen", "advertise_url", "token_env", "endpoint_url", "lease_s",
                 "startup_timeout_s",
                 "commit_timeout_s", "max_request_mb", "header_timeout_s", "body_timeout_s",
                 "max_connections", "max_connections_per_address", "trusted_proxies",
                 "wrong_tokens_per_min", "history_interval_s", "segment_push_jobs",
                 "segment_push_bytes", "spill_jobs", "spill_bytes",
                 "segment_grace_s", "sweep_s", "log_level"):
        field = fields[name]
        default = "" if field.is_required() or field.default is None else \
            f"; default {field.default}"
        p.add_argument("--" + name.replace("_", "-"), dest=name, metavar=name.upper(),
                       help=f"{field.description or name} (env {env_of(name)}{default})")
    p.add_argument("--insecure-no-token", dest="insecure_no_token", action="store_const",
                   const=True, help=f"listen beyond loopback without a bearer token, on a "
                                    f"trusted network only (env {env_of('insecure_no_token')}"
                                    f"=true)")
    p.add_argument("--ui-read-only", dest="ui_read_only", action="store_const", const=True,
                   help=f"the web dashboard (/ui/) shows the queues and refuses every action "
                        f"(env {env_of('ui_read_only')}=true)")
    p.add_argument("--grouped-segments", dest="grouped_segments", action="store_const",
                   const=True, help=f"a bulk push whose jobs have groups goes into grouped "
                                    f"segment objects too: the default (env "
                                    f"{env_of('grouped_segments')}=true)")
    p.add_argument("--no-grouped-segments", dest="grouped_segments", action="store_const",
                   const=False, help=f"a bulk push whose jobs have groups goes into the queue "
                                     f"object (env {env_of('grouped_segments')}=false)")
    p.add_argument("--held-in-records", dest="held_in_records", action="store_const",
                   const=True, help=f"a claim from a segment object names its jobs in its "
                                    f"claim record: the default (env "
                                    f"{env_of('held_in_records')}=true)")
    p.add_argument("--no-held-in-records", dest="held_in_records", action="store_const",
                   const=False, help=f"a claim from a segment object moves its jobs into the "
                                     f"queue object (env {env_of('held_in_records')}=false)")
    p.add_argument("--spill-pending", dest="spill_pending", action="store_const",
                   const=True, help=f"retry-waiting and released jobs spill too, into pending "
                                    f"spill objects: the default (env "
                                    f"{env_of('spill_pending')}=true)")
    p.add_argument("--no-spill-pending", dest="spill_pending", action="store_const",
                   const=False, help=f"retry-waiting and released jobs stay in the queue "
                                     f"object (env {env_of('spill_pending')}=false)")
    p.add_argument("--no-self-test", dest="self_test", action="store_const", const=False,
                   help=f"skip the conditional-write self-test at start-up "
                        f"(env {env_of('self_test')}=false)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tune_for_broker_process()  # this process exists to run a broker: GC tuned for it
    try:
        flags = BrokerFlags.load(vars(args))
    except ValidationError as exc:
        for line in problems(exc):
            say(line)
        return 2
    logs.setup(flags.log_level)
    shown = shown_url(flags.store)
    try:
        store = store_from_url(flags.store, endpoint_url=flags.endpoint_url)
    except OsqueueError as exc:
        return say(f"refusing to start: cannot open store {shown}: {exc.message} [{exc.code}]")
    except OSError as exc:
        return say(f"cannot open store {shown}: {exc}")
    host, port = flags.host, flags.port
    ready = False

    def on_ready(server: BrokerServer) -> None:
        nonlocal ready
        ready = True
        print(printable(f"osqueue-broker {server.broker.id} ready on {server.url} "
                        f"(store {store.url})"), file=sys.stderr, flush=True)

    try:
        server = BrokerServer(store, host, port, token=flags.bearer(),
                              config=flags.broker_config(),
                              advertise_url=flags.advertise_url, on_ready=on_ready)
    except OSError as exc:
        store.close()
        return say(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    try:
        server.run()  # the store's self-test and every queue object's load come first
    except (OsqueueError, OSError) as exc:
        what = f"{exc.message} [{exc.code}]" if isinstance(exc, OsqueueError) else str(exc)
        if ready:
            say(f"stopped on store {shown}: {what}")
            return 1
        if isinstance(exc, OsqueueError) and exc.retryable:  # rode out the start-up time
            return say(f"could not start on store {shown}: {what}")
        return say(f"refusing to start on store {shown}: {what}")
    return 0


def say(line: str) -> int:
    """Write one ``osqueue-broker: ...`` line to stderr, control characters escaped
    (a store URL or an object's text could hold terminal escapes); return exit status 2."""
    print(f"osqueue-broker: {printable(line)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
