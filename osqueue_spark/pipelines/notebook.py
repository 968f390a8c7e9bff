"""Helpers for the notebooks and jobs: the same code on Databricks and as plain local Python.

On Databricks (``dbutils`` in the notebook's globals, or the
``DATABRICKS_RUNTIME_VERSION`` variable every Databricks cluster and serverless
environment sets) widgets and secrets come from ``dbutils``; locally from
``OSQUEUE_<NAME>`` environment variables and defaults.
"""

from __future__ import annotations

import os
from typing import Any

from osqueue_spark.session import local_session

DATABRICKS_ENV = "DATABRICKS_RUNTIME_VERSION"


def on_databricks(namespace: dict[str, Any] | None = None) -> bool:
    """True inside a Databricks notebook (``dbutils`` in ``namespace``) or job."""
    return (namespace or {}).get("dbutils") is not None or bool(os.environ.get(DATABRICKS_ENV))


def dbutils_of(namespace: dict[str, Any] | None = None) -> Any:
    """The notebook's ``dbutils``, else the runtime's (a job's Python file has no
    ``dbutils`` global), else ``None`` off Databricks."""
    dbutils = (namespace or {}).get("dbutils")
    if dbutils is not None or not os.environ.get(DATABRICKS_ENV):
        return dbutils
    try:
        from databricks.sdk.runtime import dbutils as runtime_dbutils
    except ImportError:  # older runtimes: build it from the active session
        from pyspark.dbutils import DBUtils
        from pyspark.sql import SparkSession

        return DBUtils(SparkSession.getActiveSession())
    return runtime_dbutils


def widget(name: str, default: str, namespace: dict[str, Any]) -> str:
    """A Databricks text widget when ``dbutils`` is in ``namespace`` (pass ``globals()``),
    else the environment variable ``OSQUEUE_<NAME>`` or ``default``."""
    dbutils = namespace.get("dbutils")
    if dbutils is not None:
        dbutils.widgets.text(name, default)
        return str(dbutils.widgets.get(name))
    return os.environ.get(f"OSQUEUE_{name.upper()}", default)


def secret(scope: str, key: str, namespace: dict[str, Any] | None = None, *,
           env: str = "OSQUEUE_TOKEN", required: bool = True) -> str | None:
    """A secret such as the broker's bearer token.

    On Databricks: ``dbutils.secrets.get(scope, key)`` (Databricks redacts its
    value in notebook output). Elsewhere: the environment variable ``env``, or
    ``None``. With ``required=False`` a scope or key that does not exist gives
    ``None`` instead of the error (an embedded broker then makes its own token).
    Raises ``ValueError`` naming the scope and key (never a value) otherwise.
    """
    dbutils = dbutils_of(namespace)
    if dbutils is None:
        return os.environ.get(env) or None
    try:
        return str(dbutils.secrets.get(scope=scope, key=key))
    except Exception as exc:
        if not required:
            return None
        raise ValueError(
            f"cannot read secret {key!r} from secret scope {scope!r} ({type(exc).__name__}); "
            f"create it with `databricks secrets put-secret {scope} {key}` or pass another "
            "scope/key") from None


def session(namespace: dict[str, Any], app: str) -> Any:
    """The notebook's ``spark`` (Databricks, or a caller's), else a local session."""
    spark = namespace.get("spark")
    if spark is None:
        spark = local_session(app)
    return spark
