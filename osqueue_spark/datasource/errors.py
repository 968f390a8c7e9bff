"""How an osqueue error reads once Spark has carried it to the user.

Spark does not hand a data source's exception back as itself: its Python
worker formats the exception (type, message, traceback) into text, and the
driver raises that text inside its own error (``AnalysisException`` with
condition ``PYTHON_DATA_SOURCE_ERROR`` when the source is being set up,
``PythonException`` inside a failed task). Under Spark Connect that error
then crosses gRPC to the client. So a user, and code that inspects the
message, sees only what the formatted text holds.

:func:`with_code` makes that text carry the error's stable code: it adds a
note (``osqueue error code: bad_option``) to any :class:`OsqueueError`
leaving the wrapped method. Python prints notes right under the message,
so the code reads the same on classic sessions and under Connect, and the
message itself is unchanged (nor is the exception's type or pickling).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from broker.errors import OsqueueError

F = TypeVar("F", bound=Callable[..., Any])

NOTE_PREFIX = "osqueue error code: "


def note_code(exc: OsqueueError) -> OsqueueError:
    """Add the ``osqueue error code: <code>`` note to ``exc`` once; return it."""
    note = f"{NOTE_PREFIX}{exc.code}"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)
    return exc


def with_code(fn: F) -> F:
    """Wrap a data source method so that an :class:`OsqueueError` it raises (or
    that its generator raises while Spark iterates it) carries its code as a note.
    Any other exception passes through untouched."""
    import inspect

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Any:
            try:
                return (yield from fn(*args, **kwargs))
            except OsqueueError as exc:
                note_code(exc)
                raise

        return cast(F, gen)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OsqueueError as exc:
            note_code(exc)
            raise

    return cast(F, call)
