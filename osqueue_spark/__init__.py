"""osqueue_spark: a durable job queue in one JSON object on object storage, for Spark.

* :func:`start_broker` runs a broker in this process (the embedded default);
* :class:`QueueClient` talks to a broker from anywhere (driver, executors, scripts);
* :func:`register` adds the ``osqueue`` Spark data source (needs pyspark);
* :func:`push_partition` and :func:`process` build ``foreachPartition`` and
  ``mapInPandas`` functions.

Every error osqueue raises is importable from here: the tree under
:class:`OsqueueError` (:mod:`broker.errors`), the client's
:class:`InvalidArgument` and the data source's :class:`OptionError`.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

from broker.errors import (
    BrokerUnavailable,
    BrokerUnreachable,
    Conflict,
    CorruptState,
    Forbidden,
    ForeignState,
    HeadersTooLarge,
    InvalidRequest,
    JobNotFound,
    MethodNotAllowed,
    NewerState,
    NotFound,
    NotTheBroker,
    OsqueueError,
    OutcomeUnknown,
    PayloadTooLarge,
    QueueFull,
    RequestError,
    RequestKeyReused,
    RequestTimeout,
    SegmentMissing,
    StaleToken,
    StateError,
    StorageError,
    StorageRefused,
    StorageUnavailable,
    TlsFailed,
    TooManyRequests,
    Unauthorized,
    UnknownQueue,
    UnsafeStore,
    UnsupportedMediaType,
)
from osqueue_spark.args import InvalidArgument
from osqueue_spark.client import ClaimedJob, ItemResult, QueueClient
from osqueue_spark.datasource.options import OptionError
from osqueue_spark.embedded import start_broker

if TYPE_CHECKING:  # at run time these load on first use (__getattr__ below): they need pyspark
    from osqueue_spark.datasource.source import register
    from osqueue_spark.sink import push_partition
    from osqueue_spark.workers import RESULT_SCHEMA, process

__all__ = [
    "RESULT_SCHEMA",
    "BrokerUnavailable",
    "BrokerUnreachable",
    "ClaimedJob",
    "Conflict",
    "CorruptState",
    "Forbidden",
    "ForeignState",
    "HeadersTooLarge",
    "InvalidArgument",
    "InvalidRequest",
    "ItemResult",
    "JobNotFound",
    "MethodNotAllowed",
    "NewerState",
    "NotFound",
    "NotTheBroker",
    "OptionError",
    "OsqueueError",
    "OutcomeUnknown",
    "PayloadTooLarge",
    "QueueClient",
    "QueueFull",
    "RequestError",
    "RequestKeyReused",
    "RequestTimeout",
    "SegmentMissing",
    "StaleToken",
    "StateError",
    "StorageError",
    "StorageRefused",
    "StorageUnavailable",
    "TlsFailed",
    "TooManyRequests",
    "Unauthorized",
    "UnknownQueue",
    "UnsafeStore",
    "UnsupportedMediaType",
    "process",
    "push_partition",
    "register",
    "start_broker",
]

try:
    __version__ = _metadata.version("osqueue-spark")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"


#: What the Spark names need: the ``spark`` extra.
_SPARK_MODULES = ("pyspark", "pandas", "pyarrow", "py4j")
#: How to get it (there is no release on PyPI yet: see the README's Install).
SPARK_EXTRA_HINT = ("install osqueue_spark with [spark] (a checkout or a wheel of it), or "
                    "pip install 'pyspark[connect]>=4.0,<4.4' 'pandas>=2.2,<3' 'pyarrow>=15'")


def __getattr__(name: str) -> Any:
    # Spark-side helpers import pyspark lazily, so the client works without it.
    try:
        return _spark_name(name)
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] not in _SPARK_MODULES:
            raise
        raise ImportError(f"osqueue_spark.{name} needs the spark extra ({exc.name} is "
                          f"missing): {SPARK_EXTRA_HINT}", name=exc.name) from None


def _spark_name(name: str) -> Any:
    if name in ("register",):
        from osqueue_spark.datasource.source import register

        return register
    if name in ("process", "RESULT_SCHEMA"):
        from osqueue_spark import workers

        return getattr(workers, name)
    if name == "push_partition":
        from osqueue_spark.sink import push_partition

        return push_partition
    raise AttributeError(name)
