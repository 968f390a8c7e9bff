"""``start_broker``: the embedded default, a broker inside this process.

The broker's modules are imported on the first call, not with
:mod:`osqueue_spark`: a process that only pushes and claims (a Spark executor,
a script) loads neither the server nor anything tuned for a broker's own
process. An embedded broker leaves the process's garbage collector as it
found it (see :mod:`broker.gcpause`), unless asked with ``tune_gc=True``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.server import BrokerServer
    from broker.storage import ObjectStore


def start_broker(store: str | ObjectStore, host: str = "127.0.0.1", port: int = 0, *,
                 token: str | None = None, lease_s: float | None = None,
                 tune_gc: bool = False, **settings: Any) -> BrokerServer:
    """Start a broker with its HTTP server in a background thread of this process.

    ``store``: ``file:///abs/dir``, ``s3://bucket/prefix`` or a store object;
    ``port=0`` picks a free port. Extra keyword arguments are default queue
    settings (``max_attempts``, ``backoff_base_s``, ...). Returns a handle with
    ``.url`` and ``.stop()``, usable as a context manager. Raises if the store
    or an existing queue object is unusable (nothing is written then).

    ``lease_s``: the broker lease (default :data:`broker.ownership.BROKER_LEASE_S`).
    ``tune_gc``: make this process a broker's for the garbage collector, as
    ``osqueue-broker`` does for its own: higher collection thresholds, and the
    collector paused around bulk work. A bulk publish of a million jobs then
    takes about half the time (``bench/spark_bench.py --tune-gc``), but the
    change is for the whole process and is not undone by ``stop()``: use it
    only in a driver that exists to feed or drain the queue. Off by default:
    an embedded broker leaves the collector as it found it.
    """
    from broker.server import BrokerServer
    from broker.service import BrokerConfig
    from broker.storage import store_from_url


    obj = store_from_url(store) if isinstance(store, str) else store
    config = BrokerConfig(default_settings=settings) if lease_s is None else \
        BrokerConfig(lease_s=lease_s, default_settings=settings)
    return BrokerServer(obj, host, port, token=token, config=config,
                        tune_gc=tune_gc).start_in_thread()
