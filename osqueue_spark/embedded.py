"""``start_broker``: the embedded default, a broker inside this process.

The broker's modules are imported on the first call, not with
:mod:`osqueue_spark`: a process that only pushes and claims (a Spark executor,
a script) loads neither the server nor anything tuned for a broker's own
process. An embedded broker leaves the process's garbage collector as it
found it (see :mod:`broker.gcpause`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.server import BrokerServer
    from broker.storage import ObjectStore


def start_broker(store: str | ObjectStore, host: str = "127.0.0.1", port: int = 0, *,
                 token: str | None = None, lease_s: float = 30.0,
                 **settings: Any) -> BrokerServer:
    """Start a broker with its HTTP server in a background thread of this process.

    ``store``: ``file:///abs/dir``, ``s3://bucket/prefix`` or a store object;
    ``port=0`` picks a free port. Extra keyword arguments are default queue
    settings (``max_attempts``, ``backoff_base_s``, ...). Returns a handle with
    ``.url`` and ``.stop()``, usable as a context manager. Raises if the store
    or an existing queue object is unusable (nothing is written then).
    """
    from broker.server import BrokerServer
    from broker.service import BrokerConfig
    from broker.storage import store_from_url

    obj = store_from_url(store) if isinstance(store, str) else store
    config = BrokerConfig(lease_s=lease_s, default_settings=settings)
    return BrokerServer(obj, host, port, token=token, config=config).start_in_thread()
