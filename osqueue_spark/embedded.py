"""``start_broker``: the embedded default, a broker inside this process.

The broker's modules are imported on the first call, not with
:mod:`osqueue_spark`: a process that only pushes and claims (a Spark executor,
a script) loads neither the server nor anything tuned for a broker's own
process. An embedded broker leaves the process's garbage collector as it
found it (see :mod:`broker.gcpause`), unless asked with ``tune_gc=True``.

**Reachable from executors.** In the driver of a classic Spark cluster (a
``SparkContext`` in this process whose master is not ``local``), executors
run on other machines, so ``start_broker()`` listens on every interface
(``0.0.0.0``) and advertises ``http://<spark.driver.host>:<port>``; anywhere
else it listens on loopback only, as before. A bearer token is on whenever it
listens beyond loopback: pass ``handle.url`` and ``handle.token`` on as the
``broker`` and ``token`` options. Spark hides the ``token`` option's value
in plans and the UI, because the option's name matches Spark's default
``spark.redaction.regex`` (``(?i)secret|password|token|access[.]?key``).

Under Spark Connect (Databricks serverless, shared-access clusters) this
process is a client, not the driver, and executors cannot reach it: run a
standalone broker (``osqueue-broker``) they can reach instead.
"""

from __future__ import annotations

import dataclasses
import secrets
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from broker.http.server import BrokerServer
    from broker.storage import ObjectStore

#: Listening on every interface, for a broker the executors must reach.
ALL_INTERFACES = "0.0.0.0"


def _classic_driver_conf() -> dict[str, str] | None:
    """``spark.master`` and ``spark.driver.host`` of this process's classic SparkContext.

    None without one (no pyspark imported, no context, or a Spark Connect
    client, which has no SparkContext), or when the JVM refuses to tell.
    Never imports pyspark itself.
    """
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        return None
    try:
        conf = sc.getConf()
        return {key: value for key in ("spark.master", "spark.driver.host")
                if (value := conf.get(key)) is not None}
    except Exception:  # a JVM that refuses the call (a locked-down shared cluster)
        return None


def cluster_driver_host(spark_conf: Mapping[str, str] | None = None) -> str | None:
    """The driver's address executors use, when this process is a cluster's driver.

    Reads ``spark_conf`` (default: the conf of this process's classic
    SparkContext) and returns its ``spark.driver.host`` when its
    ``spark.master`` is set and not ``local...`` (executors elsewhere); None
    otherwise (no Spark, local mode, Spark Connect).
    """
    conf = _classic_driver_conf() if spark_conf is None else spark_conf
    if not conf:
        return None
    master = conf.get("spark.master") or ""
    if not master or master.startswith("local"):
        return None
    return conf.get("spark.driver.host") or None


def start_broker(store: str | ObjectStore, host: str | None = None, port: int = 0, *,
                 advertise_url: str | None = None, token: str | None = None,
                 insecure_no_token: bool = False, spark_conf: Mapping[str, str] | None = None,
                 lease_s: float | None = None, tune_gc: bool = False,
                 segment_push_jobs: int | None = None, ui_read_only: bool = False,
                 startup_timeout_s: float | None = None,
                 trusted_proxies: str | Sequence[str] = (),
                 grouped_segments: bool = True,
                 **settings: Any) -> BrokerServer:
    """Start a broker with its HTTP server in a background thread of this process.

    ``store``: ``file:///abs/dir``, ``s3://bucket/prefix`` or a store object;
    ``port=0`` picks a free port. Extra keyword arguments are default queue
    settings (``max_attempts``, ``backoff_base_s``, ...). Returns a handle with
    ``.url`` (the advertised URL: what clients and executors should use),
    ``.token`` (the bearer token, None without auth), ``.dashboard_url`` (the
    web dashboard, ``{url}/ui/``: its login form asks for the token; a notebook
    shows the handle as a link to it) and ``.stop()``, usable as a context
    manager; its repr never shows the token. Raises if the store or
    an existing queue object is unusable (nothing is written then), and
    ``OSError`` if the address cannot be bound.

    ``host``: the address to listen on. None (the default) means
    ``0.0.0.0`` when this process is the driver of a cluster (see
    :func:`cluster_driver_host`) or when ``advertise_url`` names another
    machine's address, and ``127.0.0.1`` otherwise.
    ``advertise_url``: the URL to advertise, as given (include the port);
    default ``http://<spark.driver.host>:<port>`` on a cluster's driver, else
    from ``host``.
    ``token``: the bearer token to require. When the broker listens beyond
    loopback and none is given, one is generated
    (``secrets.token_urlsafe(32)``) unless ``insecure_no_token=True``; on
    loopback no token is required unless one is given.
    ``spark_conf``: the Spark conf to read ``spark.master`` and
    ``spark.driver.host`` from instead of this process's SparkContext's.

    ``lease_s``: the broker lease (default :data:`broker.limits.BROKER_LEASE_S`).
    ``segment_push_jobs``: a push or publish of at least this many jobs sharing
    their options (none with a key) goes into segment objects (default 10,000;
    0: no push does; so does one of 64 KiB of payload or more, the
    ``segment_push_bytes`` of ``BrokerConfig``; see ``docs/architecture.md``).
    ``tune_gc``: make this process a broker's for the garbage collector, as
    ``osqueue-broker`` does for its own: higher collection thresholds, and the
    collector paused around bulk work. A bulk publish of a million jobs then
    takes about half the time (``bench/spark_bench.py --tune-gc``), but the
    change is for the whole process and is not undone by ``stop()``: use it
    only in a driver that exists to feed or drain the queue. Off by default:
    an embedded broker leaves the collector as it found it.
    ``ui_read_only``: the dashboard shows the queues and refuses every action.
    ``grouped_segments``: a bulk push or publish whose jobs have groups goes
    into grouped segment objects too (``BrokerConfig.grouped_segments``; on by
    default, False puts them into the queue object).
    ``startup_timeout_s``: how long start-up rides out transient storage errors
    (throttling, 5xx, timeouts, connection errors: each retry is logged at
    warning on the ``osqueue.broker`` logger) before it raises the last one
    (default 60; 0: not at all). A missing bucket, denied access, a failed
    self-test or a corrupt or newer queue object raise at once.
    ``trusted_proxies``: addresses or networks (a list, or comma-separated) of the
    proxies in front of the broker, whose ``X-Forwarded-Proto``/``-For`` are
    believed (the dashboard's cookie gets ``Secure`` behind a TLS proxy); default
    none; ``ValueError`` for an entry that is not an IP address or network.
    """
    from broker.http.server import BrokerServer, is_loopback
    from broker.service.config import BrokerConfig
    from broker.storage import store_from_url

    driver_host = cluster_driver_host(spark_conf)
    if host is None:
        advertised_host = urlsplit(advertise_url).hostname if advertise_url else None
        remote = driver_host is not None or (
            advertised_host is not None and not is_loopback(advertised_host))
        host = ALL_INTERFACES if remote else "127.0.0.1"
    if token is None and not insecure_no_token and not is_loopback(host):
        token = secrets.token_urlsafe(32)
    obj = store_from_url(store) if isinstance(store, str) else store
    proxies = trusted_proxies.split(",") if isinstance(trusted_proxies, str) else trusted_proxies
    config = BrokerConfig(default_settings=settings, ui_read_only=ui_read_only,
                          grouped_segments=grouped_segments,
                          trusted_proxies=tuple(p.strip() for p in proxies if p.strip()))
    if lease_s is not None:
        config = dataclasses.replace(config, lease_s=lease_s)
    if segment_push_jobs is not None:
        config = dataclasses.replace(config, segment_push_jobs=segment_push_jobs)
    if startup_timeout_s is not None:
        config = dataclasses.replace(config, startup_timeout_s=startup_timeout_s)
    # The driver's address stands for "every interface" only: a broker bound to
    # one address advertises that one.
    wildcard = host in (ALL_INTERFACES, "::", "")
    return BrokerServer(obj, host, port, token=token, config=config,
                        advertise_url=advertise_url,
                        advertise_host=driver_host if wildcard else None,
                        tune_gc=tune_gc).start_in_thread()
