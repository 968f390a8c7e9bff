"""An osqueue error raised inside Spark, raised again on the driver as itself.

Spark hands the driver an osqueue error from its Python workers (a task's
write refused by the broker, a read of a queue that does not exist, a
``process()`` worker's claim) only as text inside its own error: a
``PythonException`` ("An exception was thrown from the Python worker:" and
the worker's traceback), an ``AnalysisException`` ("[PYTHON_DATA_SOURCE_ERROR]
Failed to ..."), or a bare ``Py4JJavaError`` with a page of Java stack per
task. The cause is there, well written, but last.

:func:`install` (called by :func:`osqueue_spark.register`) makes such an
error reach the user's code as the osqueue error it carries: its class (so
``except PayloadTooLarge`` works), ``str()`` starting ``[code] message``, and
Spark's whole error as a note below it (and as the ``spark_error``
attribute). Spark errors that carry no osqueue error pass unchanged, and so
does a ``StreamingQueryException`` (streams keep Spark's type: ``query.exception()``
and ``awaitTermination`` callers catch it; its text still names the cause).

How: on a classic session, PySpark turns JVM errors into Python ones in its
wrapper of py4j's ``get_return_value`` (``install_exception_handler``); this
wraps that wrapper once more. A new ``SparkSession`` reinstalls PySpark's, so
``register()``, which every session needs anyway, installs this again. On a
Spark Connect session, the session's client raises every RPC error through
its ``_handle_error``, which is wrapped per client.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

from broker.errors import OsqueueError

log = logging.getLogger("osqueue.spark")

#: A Python traceback's header: the worker's text holds one per chained exception.
TRACEBACK = "Traceback (most recent call last):"
#: The final line of a traceback whose exception is osqueue's: module, class, message.
_RAISED = re.compile(r"^((?:broker|osqueue_spark)(?:\.\w+)*)\.(\w+): (.*)$")
_NOTE = re.compile(r"osqueue error code: ([a-z0-9_]+)")
#: What Spark appends to its error's message (on the same line when it is one line).
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")
#: Marks the wrappers installed here, so installing again changes nothing.
_MARK = "_osqueue_driver_errors"
#: Spark's exception kinds left as they are (see the module docstring).
KEPT = frozenset({"StreamingQueryException"})


def _classes(root: type[OsqueueError] = OsqueueError) -> Iterator[type[OsqueueError]]:
    yield root
    for sub in root.__subclasses__():
        yield from _classes(sub)


def _class_of(module: str, name: str, code: str | None) -> type[OsqueueError]:
    """The osqueue error class named ``module.name`` (or only ``name``, or with
    ``code``); the root when none is loaded here."""
    by_name = [c for c in _classes() if c.__name__ == name]
    exact = [c for c in by_name if c.__module__ == module]
    coded = [c for c in _classes() if code is not None and c.code == code]
    return (exact or by_name or coded or [OsqueueError])[0]


def osqueue_error_in(text: str) -> OsqueueError | None:
    """The osqueue error whose traceback ``text`` (a Spark error's) ends with:
    the final exception of its last traceback, if that is an osqueue error
    (a class of ``broker`` or ``osqueue_spark``), rebuilt with its class and
    the first line of its message; the ``osqueue error code`` note, when it
    follows, names the code. None when the text carries no osqueue error."""
    start = text.rfind(TRACEBACK)
    if start < 0:
        return None
    lines = text[start:].splitlines()[1:]
    for i, line in enumerate(lines):
        if not line or line[0] in " \t":  # a frame, or its source line
            continue
        raised = _RAISED.match(line)
        if raised is None:
            return None  # the final exception is not osqueue's
        module, name, message = raised.groups()
        note = next((m for rest in lines[i + 1:i + 4] if (m := _NOTE.search(rest))), None)
        code = note.group(1) if note else None
        cls = _class_of(module, name, code)
        return cls(_SQLSTATE.sub("", message).strip())
    return None


def surfaced(spark_error: BaseException) -> OsqueueError | None:
    """The driver's error for ``spark_error`` if it carries an osqueue error (see
    the module docstring): that error, ``str()`` ``[code] message``, Spark's text
    as a note and ``spark_error`` attribute. None to leave ``spark_error`` as is."""
    if isinstance(spark_error, OsqueueError) or type(spark_error).__name__ in KEPT:
        return None
    try:
        text = str(spark_error)
    except Exception:  # (a JVM error that cannot be printed: leave it)
        return None
    found = osqueue_error_in(text)
    if found is None:
        return None
    found.args = (f"[{found.code}] {found.message}",)
    found.add_note(f"Spark's error ({type(spark_error).__name__}): {text}")
    found.spark_error = spark_error  # type: ignore[attr-defined]
    return found


def _surfacing(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call``, raising :func:`surfaced` errors in place of the Spark errors
    that carry them."""
    if getattr(call, _MARK, False):
        return call

    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            ours = surfaced(exc)
            if ours is None:
                raise
            raise ours from None

    setattr(wrapper, _MARK, True)
    return wrapper


def install(spark: Any) -> None:
    """Make the osqueue errors Spark carries reach the driver as themselves, for
    ``spark`` (classic: every classic session of this process; Connect: this
    session's client). Idempotent; does nothing where the hooks are missing."""
    if type(spark).__module__.startswith("pyspark.sql.connect."):
        client = getattr(spark, "client", None)
        handle = getattr(client, "_handle_error", None)
        if client is None or handle is None:
            log.debug("osqueue: this Spark Connect client has no _handle_error; "
                      "errors keep Spark's form")
            return
        client._handle_error = _surfacing(handle)
        return
    import py4j.java_gateway

    py4j.java_gateway.get_return_value = _surfacing(py4j.java_gateway.get_return_value)
