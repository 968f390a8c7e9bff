"""``format("osqueue")``: the PySpark data source (batch and streaming).

Options are parsed once into frozen dataclasses (:mod:`.options`); the
reader, writer and streams open their connections in ``read()`` and
``write()``, never when they are built, so every class here pickles.
Needs pyspark.
"""

from osqueue_spark.datasource.source import OsqueueDataSource, register

__all__ = ["OsqueueDataSource", "register"]
