"""Key lookup: positions of values (or combinations of values) in a fixed list of keys."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from tabloader.encoding.contract import NULL_ID, OOV_START, label_of
from tabloader.encoding.cpu.columns import NormalizedColumn, exact_ints, normalize_column


def _kind_of_dtype(dtype: Any) -> str:
    from pandas.api import types as pdt

    if pdt.is_integer_dtype(dtype) or pdt.is_bool_dtype(dtype):
        return "int"
    if pdt.is_float_dtype(dtype):
        return "float"
    if pdt.is_string_dtype(dtype):
        return "str"
    return "null"


class ValueLookup:
    """Positions of values (or combinations of values) in a fixed list of unique keys.

    ``keys`` are one pandas Series per key column (normalized values: int64, float64 or
    strings, no nulls, unique rows). :meth:`positions` maps normalized query columns to the
    row of ``keys`` they equal, or -1. Integers and floats match by value; strings only match
    strings (a string key queried with numbers raises a TypeError naming the column).
    Built once per fitted operator and cached; the lookups are vectorized (a hash index for
    numbers, pyarrow's ``index_in`` for strings).
    """

    def __init__(self, keys: Sequence[Any], op: Any = None, what: Any = None) -> None:
        self.op, self.what = op, what
        self.kinds = [_kind_of_dtype(k.dtype) for k in keys]
        self.size = len(keys[0]) if keys else 0
        if len(keys) == 1:
            self.levels = [self._level(keys[0], self.kinds[0])]
            self.combined = None
        else:
            uniques = [pd.unique(k.to_numpy() if self.kinds[i] != "str" else k) for i, k in enumerate(keys)]
            self.levels = [self._level(pd.Series(u), kind) for u, kind in zip(uniques, self.kinds)]
            codes = [self._positions1(level, kind, normalize_column(op, what, k))
                     for level, kind, k in zip(self.levels, self.kinds, keys)]
            self.combined = pd.Index(self._combine(codes))

    @staticmethod
    def _level(values: Any, kind: str) -> Any:
        import pyarrow as pa

        if kind == "str":
            return pa.array(values.to_numpy(dtype=object) if len(values) else [], type=pa.string())
        if kind == "int":  # uint64 stays uint64: its values >= 2**63 are no negative numbers
            ints = values.to_numpy()
            return pd.Index(ints if ints.dtype == np.uint64 else ints.astype(np.int64))
        if kind == "float":
            return pd.Index(values.to_numpy(dtype=np.float64))
        return pd.Index(np.zeros(0, np.int64))

    def _combine(self, codes: list[np.ndarray]) -> np.ndarray:
        out = np.zeros(len(codes[0]), dtype=np.int64)
        missing = np.zeros(len(codes[0]), dtype=bool)
        for code, level in zip(codes, self.levels):
            out = out * max(len(level), 1) + code
            missing |= code < 0
        out[missing] = -1
        return out

    def _positions1(self, level: Any, kind: str, col: NormalizedColumn) -> np.ndarray:
        import pyarrow.compute as pc

        n = len(col)
        if len(level) == 0 or col.kind == "null":
            return np.full(n, -1, dtype=np.int64)
        if kind == "str" or col.kind == "str":
            if kind != col.kind:
                raise TypeError(f"{label_of(self.op)}: column {self.what!r} was fit on "
                                f"{'strings' if kind == 'str' else 'numbers'} but now holds "
                                f"{'strings' if col.kind == 'str' else 'numbers'}")
            pos = pc.index_in(col.values, value_set=level)
            return pos.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        values = col.values
        if kind == "int":  # match by value: a query the level's dtype cannot hold is unseen
            values, fits = exact_ints(values, level.dtype)
            pos = level.get_indexer(values).astype(np.int64, copy=False)
            return pos if fits is None else np.where(fits, pos, -1)
        if col.kind == "int":
            values = values.astype(np.float64)
        return level.get_indexer(values).astype(np.int64, copy=False)

    def positions(self, cols: Sequence[NormalizedColumn]) -> np.ndarray:
        """Row of ``keys`` equal to each query row (-1 where none; null rows give -1 too)."""
        if self.combined is None:
            pos = self._positions1(self.levels[0], self.kinds[0], cols[0])
        else:
            codes = [self._positions1(level, kind, col) for level, kind, col in zip(self.levels, self.kinds, cols)]
            combined = self._combine(codes)
            pos = np.where(combined >= 0, self.combined.get_indexer(combined), -1)
        if any(c.mask is not None for c in cols):
            pos = pos.copy() if not pos.flags.writeable else pos
            for c in cols:
                if c.mask is not None:
                    np.putmask(pos, c.mask, -1)
        return pos


def assign_ids(pos: np.ndarray, mask: np.ndarray | None, num_buckets: int, hasher: Any, dtype: Any) -> np.ndarray:
    """Ids of the encoding contract from vocabulary positions (see :mod:`tabloader.encoding.contract`).

    ``pos`` is the vocabulary position of each row (-1: out of vocabulary), ``mask`` the null
    rows, ``hasher(rows)`` the uint64 hashes of the given out-of-vocabulary rows (called only
    with ``num_buckets > 1``). The id of position ``i`` is ``2 + num_buckets + i``.

    Example:
        >>> assign_ids(np.array([0, -1, 1, 0]), np.array([False, False, False, True]), 1, None, "int64").tolist()
        [3, 2, 4, 1]
    """
    # In place on the fresh ``pos`` array: fewer passes and allocations (this is the hot loop).
    oov = pos < 0
    ids = pos if pos.flags.writeable and pos.dtype == np.int64 else pos.astype(np.int64)
    ids += OOV_START + num_buckets
    np.putmask(ids, oov, OOV_START)
    if num_buckets > 1:
        if mask is not None:
            oov &= ~mask
        rows = np.flatnonzero(oov)
        if len(rows):
            ids[rows] = (hasher(rows) % np.uint64(num_buckets)).astype(np.int64) + OOV_START
    if mask is not None:
        np.putmask(ids, mask, NULL_ID)
    return ids if ids.dtype == np.dtype(dtype) else ids.astype(dtype)
