"""A working table read column by column as numpy arrays, its DataFrame built only when asked.

The planner's hot path reads a dozen columns of the configuration table per plan. A
:class:`Table` is a set of rows of a source (a DataFrame, or another :class:`Table`) with derived
columns added; a column is read from the source once, taken at the rows and kept. Text columns
read as numpy object arrays (the same strings: filtering and indexing them is several times faster
than on pandas 3's Arrow-backed strings), numeric ones as numpy arrays. :meth:`Table.frame` builds
the DataFrame (once) for the readers that want one; the hot path never needs it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import numpy as np
import pandas as pd


def column_array(col: pd.Series):
    """A DataFrame column as the table keeps it: numpy values, text as an object array, other
    extension types as their pandas array."""
    t = col.dtype
    if isinstance(t, np.dtype):
        return col.to_numpy()
    if pd.api.types.is_string_dtype(t):
        return col.to_numpy(dtype=object)
    return col.array


def floats(table, name: str) -> np.ndarray:
    """Column ``name`` of a table (a DataFrame, a :class:`Table`, or anything whose columns read as
    arrays by name) as a float array."""
    return np.asarray(table[name], dtype=float)


def texts(table, name: str) -> list[str]:
    """Column ``name`` of a table (as :func:`floats`) as a list of strings."""
    return [str(v) for v in np.asarray(table[name], dtype=object).tolist()]


class Table:
    """Rows ``rows`` (positions, ``None``: all) of ``source`` with the ``derived`` columns (numpy
    arrays, one value per row) replacing same-named source columns in place or added after them;
    ``columns`` restricts it to those columns, in that order. Immutable: :meth:`take` and
    :meth:`with_columns` return new tables sharing the columns already read."""

    __slots__ = ("_source", "_rows", "_derived", "_names", "_cache", "_frame", "_n")

    def __init__(
        self,
        source: pd.DataFrame | Table,
        rows: np.ndarray | None = None,
        derived: dict[str, object] | None = None,
        columns: Iterable[str] | None = None,
    ) -> None:
        self._source = source
        self._rows = None if rows is None else np.asarray(rows, dtype=np.int64)
        self._derived = {c: v.to_numpy() if isinstance(v, pd.Series) else v for c, v in (derived or {}).items()}
        base = list(source.columns)
        names = base + [c for c in self._derived if c not in set(base)]
        self._names = names if columns is None else list(columns)
        self._cache: dict[str, object] = {}
        self._frame: pd.DataFrame | None = None
        self._n = len(source) if self._rows is None else len(self._rows)

    @property
    def columns(self) -> list[str]:
        return list(self._names)

    def __len__(self) -> int:
        return self._n

    @property
    def empty(self) -> bool:
        return self._n == 0 or not self._names

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __getitem__(self, name: str):
        """Column ``name`` as an array (read once)."""
        v = self._derived.get(name)
        if v is not None:
            return v
        v = self._cache.get(name)
        if v is None:
            if name not in self._names:
                raise KeyError(name)
            src = self._source
            v = src[name] if isinstance(src, Table) else column_array(src[name])
            if self._rows is not None:
                v = v[self._rows] if isinstance(v, np.ndarray) else v.take(self._rows)
            self._cache[name] = v
        return v

    def get(self, name: str, default=None):
        return self[name] if name in self._names else default

    def take(self, rows: np.ndarray, columns: Iterable[str] | None = None) -> Table:
        """Rows ``rows`` (positions) of this table, of the ``columns`` only when given."""
        return Table(self, rows, columns=columns)

    def with_columns(self, **derived) -> Table:
        """This table with the ``derived`` columns (arrays) added or replaced."""
        out = Table(self, None, derived)
        out._cache = {c: v for c, v in self._cache.items() if c not in derived}
        for c, v in self._derived.items():
            if c not in derived:
                out._cache[c] = v
        return out

    def _plain(self) -> bool:
        return (
            isinstance(self._source, pd.DataFrame)
            and self._rows is None
            and not self._derived
            and self._names == list(self._source.columns)
        )

    def root_attrs(self) -> dict:
        src = self._source
        return src.root_attrs() if isinstance(src, Table) else src.attrs

    def frame(self) -> pd.DataFrame:
        """The table as a DataFrame (a fresh 0..n-1 index; object columns stay object), built once;
        it carries the source frame's ``attrs``. Never modify it: it is shared."""
        if self._frame is None and self._plain():
            self._frame = self._source  # the source frame itself, as given
        if self._frame is None:
            index = pd.RangeIndex(self._n)
            cols = {}
            for c in self._names:
                v = self[c]
                if isinstance(v, np.ndarray) and v.dtype.kind == "O":
                    v = pd.Series(v, index=index, dtype=object, copy=False)
                cols[c] = v
            out = pd.DataFrame(cols, index=index)
            attrs = self.root_attrs()
            if attrs:
                out.attrs = copy.deepcopy(attrs)
            self._frame = out
        return self._frame


def configs_table(coeffs) -> Table:
    """The configuration table of a coefficient bundle as a :class:`Table`, one per bundle, so that
    every reader of the bundle (the planner's preparation, the evaluator) reads each column once.
    The bundle is frozen and its tables are never modified in place (``coefficients.py``)."""
    t = coeffs.__dict__.get("_configs_table")
    if t is None or t._source is not coeffs.configs:
        t = Table(coeffs.configs)
        object.__setattr__(coeffs, "_configs_table", t)
    return t
