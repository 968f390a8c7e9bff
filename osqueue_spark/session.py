"""A SparkSession for osqueue: classic or Spark Connect, local or on Databricks.

Every session this module gives has the ``osqueue`` data source registered.
Needs pyspark (the ``spark`` extra); the Connect client (gRPC) only when a
Connect session is asked for.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from osqueue_spark.datasource.source import register


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect client session (``pyspark.sql.connect.session.SparkSession``).

    Such a session has no ``sparkContext`` (nor RDDs, broadcasts, accumulators)
    and is not an instance of the classic ``pyspark.sql.SparkSession`` class:
    ask this instead of ``isinstance``. Looks at the class's module only, so it
    imports nothing (Connect's gRPC client is an optional extra).
    """
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def sql_functions(spark: Any) -> Any:
    """The ``pyspark.sql.functions`` module that builds columns for ``spark``.

    ``pyspark.sql.functions`` picks Connect or classic columns by the process
    (``SPARK_CONNECT_MODE_ENABLED``), not by the session: a process that holds a
    Connect session built with the Connect builder (as :func:`local_session`
    builds one) beside a classic one gets classic columns, which a Connect
    DataFrame refuses. Asking the session avoids that.
    """
    if is_connect(spark):
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions

    return functions


def local_session(app: str = "osqueue", cores: int | None = None,
                  remote: str | None = None) -> Any:
    """A SparkSession with osqueue registered: a Spark Connect client of ``remote``
    (or of ``$SPARK_REMOTE``), e.g. ``sc://host:15002``, else a local classic
    session whose Python workers use this interpreter (``cores``: local threads,
    default all)."""
    remote = remote or os.environ.get("SPARK_REMOTE")
    if remote:
        # The Connect builder itself: the generic one refuses a remote session
        # while this process also runs a classic one. Options are SQL confs the
        # client may set (the server owns the rest, its log level included).
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        client = ConnectSession.builder.remote(remote).getOrCreate()
        register(client)
        return client
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return databricks_session()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = f"local[{cores or '*'},4]"
    spark = (SparkSession.builder.master(master).appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "8")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    if not is_connect(spark):  # SPARK_API_MODE=connect makes the builder give a Connect one
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def databricks_session() -> Any:
    """The session Databricks gives a job (classic, or Spark Connect on serverless),
    with osqueue registered; its settings are the cluster's, not ours."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    register(spark)
    return spark
