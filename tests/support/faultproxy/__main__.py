"""``python -m tests.support.faultproxy``: run the fault proxy on its own
(prints ``faultproxy ready on URL`` on stderr once it listens)."""

from __future__ import annotations

import argparse
import sys

from tests.support.faultproxy import proxy as fp
from tests.support.serving import StopSignals


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.faultproxy", description=fp.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--upstream", help="the S3 server to proxy, http://host:port")
    src.add_argument("--moto", action="store_true",
                     help="start a moto S3 server in this process and proxy it")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="proxy port (0: a free one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault RNG")
    p.add_argument("--rate", type=float, default=0.0,
                   help="fraction of storage requests faulted, 0..1")
    p.add_argument("--weights", default="",
                   help="relative weights, e.g. drop=2,error500=1,error503=1,delay=0.1 "
                        "(error, the configured one: 0 unless given)")
    p.add_argument("--delay-s", type=float, default=11.0,
                   help="seconds a delayed request is held (beyond the client's read timeout)")
    p.add_argument("--delay-then", choices=["forward", "drop", "mixed"], default="mixed")
    p.add_argument("--drop-methods", default="PUT",
                   help="comma-separated methods whose answers may be dropped")
    p.add_argument("--disabled", action="store_true", help="start with faults off")
    p.add_argument("--log-requests", metavar="PATH",
                   help="append one JSON line per storage request (time, method, path, "
                        "condition, body bytes, fault, upstream status) to PATH")
    p.add_argument("--bucket", action="append", default=[],
                   help="with --moto: create this bucket first")
    args = p.parse_args(argv)
    config = fp.FaultConfig(rate=args.rate, weights=fp.parse_weights(args.weights),
                         drop_methods=tuple(m for m in args.drop_methods.split(",") if m),
                         delay_s=args.delay_s, delay_then=args.delay_then,
                         enabled=not args.disabled)
    moto = None
    upstream = args.upstream
    if args.moto:
        from tests.support.motoserver import MotoServer, set_default_credentials

        set_default_credentials()
        moto = MotoServer().start()
        for bucket in args.bucket:
            moto.create_bucket(bucket)
        upstream = moto.endpoint
    proxy = fp.FaultProxy(upstream, seed=args.seed, config=config, host=args.host,
                       port=args.port, request_log=args.log_requests).start()
    stop = StopSignals()
    print(f"faultproxy ready on {proxy.url} (upstream {upstream})", file=sys.stderr, flush=True)
    stop.wait()
    proxy.stop()
    if moto is not None:
        moto.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
