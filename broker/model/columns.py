"""Rows of one NamedTuple type kept column-wise: one list per field.

A claim of 10,000 jobs answered as 10,000 NamedTuples leaves 10,000 objects
for the garbage collector to track, and those that outlive two young
collections (a large batch does) count towards the next *full* collection.
Python untracks a plain tuple of strings and numbers at its first collection,
but never an instance of a NamedTuple, a dataclass or any class of ours. In a
broker process that costs little (its entry point tunes the collector); in an
embedded broker it is the Spark driver's collector, which the package must
leave alone, and each full pass there walks every job of the queue
(``bench/spark_bench.py``, process rows: about a third of the run before this).

So the per-job results of the hot calls (claim, complete) are kept as a few
lists of strings, bytes and numbers, which the collector does not track item
by item. A :class:`Columns` still reads as a ``Sequence`` of its row type:
``rows[0].token``, ``for job in rows``, ``rows == [...]``; the row objects are
made only when read that way. The HTTP layer reads the lists themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from typing import Any, ClassVar, Generic, TypeVar, overload

Row = TypeVar("Row", bound=tuple[Any, ...])
Item = TypeVar("Item")


class LazySequence(Sequence[Item]):
    """A sequence whose items are made when read: equal to any sequence of equal
    items, as the list it stands for would be (and, like a list, unhashable)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]


class Columns(LazySequence[Row], Generic[Row]):
    """Rows of :attr:`row_type` (a NamedTuple class), one list per field, in
    field order (:attr:`columns`). Subclasses set :attr:`row_type` and name
    the lists; ``append`` takes a row, the lists may be appended to directly
    (all of them, one value each)."""

    __slots__ = ("columns",)
    row_type: ClassVar[Any]

    def __init__(self, *columns: list[Any]) -> None:
        width = len(self.row_type._fields)
        if not columns:  # (in C: every answer of a hot call makes two empty ones)
            self.columns: tuple[list[Any], ...] = tuple(map(list, repeat((), width)))
            return
        if len(columns) != width or len({len(c) for c in columns}) > 1:
            raise ValueError(f"{type(self).__name__} takes {width} lists of one length")
        self.columns = columns

    @classmethod
    def of(cls, rows: Iterable[Row]) -> Columns[Row]:
        """The columns of ``rows`` (row type instances or plain tuples of its fields)."""
        out = cls()
        for row in rows:
            out.append(row)
        return out

    def append(self, row: Row) -> None:
        """Add one row (all its fields, in order); raises ``ValueError``, adding
        nothing, for a row of another width."""
        if len(row) != len(self.columns):
            raise ValueError(f"a {type(self).__name__} row has {len(self.columns)} fields, "
                             f"not {len(row)}")
        for column, value in zip(self.columns, row, strict=True):
            column.append(value)

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """The rows as plain tuples (no row objects made)."""
        return zip(*self.columns, strict=True)

    def __len__(self) -> int:
        return len(self.columns[0])

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        if isinstance(index, slice):
            sliced = [c[index] for c in self.columns]
            return [self.row_type._make(r) for r in zip(*sliced, strict=True)]
        return self.row_type._make(c[index] for c in self.columns)

    def __iter__(self) -> Iterator[Row]:
        return map(self.row_type._make, zip(*self.columns, strict=True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"


def plain_rows(rows: Sequence[Row]) -> Iterable[tuple[Any, ...]]:
    """``rows`` as tuples of their fields, without making row objects of columns."""
    return rows.rows() if isinstance(rows, Columns) else rows
