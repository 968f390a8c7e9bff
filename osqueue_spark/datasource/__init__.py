"""``format("osqueue")``: the PySpark data source (batch and streaming).

Options are parsed once into frozen dataclasses (:mod:`.options`); the
reader, writer and streams open their connections in ``read()`` and
``write()``, never when they are built, so every class here pickles.
The source, reader, writer and streams need pyspark; :mod:`.options` and
:mod:`.rows` do not, and ``import osqueue_spark`` loads only those (it exports
:class:`~osqueue_spark.datasource.options.OptionError`), so this package's own
names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from osqueue_spark.datasource.source import OsqueueDataSource, register

__all__ = ["OsqueueDataSource", "register"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from osqueue_spark.datasource import source

    return getattr(source, name)
