"""Helpers for the notebooks: the same code on Databricks and as plain local Python."""

from __future__ import annotations

import os
from typing import Any


def widget(name: str, default: str, namespace: dict[str, Any]) -> str:
    """A Databricks text widget when ``dbutils`` is in ``namespace`` (pass ``globals()``),
    else the environment variable ``OSQUEUE_<NAME>`` or ``default``."""
    dbutils = namespace.get("dbutils")
    if dbutils is not None:
        dbutils.widgets.text(name, default)
        return str(dbutils.widgets.get(name))
    return os.environ.get(f"OSQUEUE_{name.upper()}", default)


def session(namespace: dict[str, Any], app: str) -> Any:
    """The notebook's ``spark`` (Databricks, or a caller's), else a local session."""
    spark = namespace.get("spark")
    if spark is None:
        from osqueue_spark.pipelines import local_session

        spark = local_session(app)
    return spark
