"""Which Python a local classic session's Spark workers run: this one, unless told.

Classic PySpark starts its Python workers with ``SparkContext.pythonExec``,
read once from ``PYSPARK_PYTHON`` when the context is made (else ``python3``,
whatever that is on ``PATH``), and copies it into each Python function, data
source and ``mapInPandas`` function when that is made. A script run as
``.venv/bin/python script.py`` with the venv not activated therefore gets
workers of another Python, which cannot import ``osqueue_spark``
(``ModuleNotFoundError`` in every task).

:func:`use_this_python` (called by :func:`osqueue_spark.register`, before it
registers the data source) points a *local* session's workers at the
driver's own interpreter, which has the package, when nobody chose one:
neither ``PYSPARK_PYTHON`` nor ``spark.pyspark.python`` is set. It changes
``pythonExec`` of the running context, so what is made after it (the data
source, then ``mapInPandas(process(...))``) uses it; a user's explicit choice,
a cluster (executors elsewhere have their own Python) and Spark Connect
sessions (the server picks its workers) are left alone.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

log = logging.getLogger("osqueue.spark")


def chosen_python(*, master: str, current: str, env_python: str | None,
                  conf_python: str | None, executable: str) -> str | None:
    """The interpreter the workers should run instead of ``current``, or None to
    leave it: ``executable`` for a ``local...`` master when neither the
    environment (``env_python``: ``PYSPARK_PYTHON``) nor the conf
    (``conf_python``: ``spark.pyspark.python``) names one. Pure."""
    if not master.startswith("local") or env_python or conf_python or not executable:
        return None
    return None if current == executable else executable


def use_this_python(spark: Any) -> str | None:
    """Point a local classic session's Python workers at this interpreter when
    nobody chose one (see the module docstring); log it. Returns the
    interpreter set, or None when nothing changed (a Connect session, a
    cluster, a choice already made, or a context that will not tell)."""
    if type(spark).__module__.startswith("pyspark.sql.connect."):
        return None  # a client: the Connect server runs the workers
    try:
        sc = spark.sparkContext
        master = str(sc.master)
        conf_python = sc.getConf().get("spark.pyspark.python")
    except Exception:  # a JVM that refuses the call (a locked-down shared cluster)
        return None
    target = chosen_python(master=master, current=str(getattr(sc, "pythonExec", "")),
                           env_python=os.environ.get("PYSPARK_PYTHON"),
                           conf_python=conf_python, executable=sys.executable)
    if target is None:
        return None
    log.info("osqueue: this local Spark session's Python workers will run %s (this "
             "interpreter, which has osqueue_spark) instead of %r: PYSPARK_PYTHON was not "
             "set; set it to choose another", target, sc.pythonExec)
    sc.pythonExec = target
    return target
