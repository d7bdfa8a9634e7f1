"""Key lookup on the device: positions of values (or combinations) in a fixed list of keys.

The keys come from fitted state (pandas, on the host) and are copied to the device once, when
the lookup is built (once per fitted operator and process); every partition is then looked up
on the GPU: numbers by ``cupy.searchsorted`` in the sorted keys and an equality check, strings
by a device join (``cudf.Index.get_indexer``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.encoding.contract import NULL_ID, OOV_START
from tabloader.encoding.cpu import lookup as cpu_lookup
from tabloader.encoding.cpu.columns import exact_ints
from tabloader.encoding.gpu.columns import NormalizedColumn
from tabloader.encoding.gpu.hashing import cross_hash

__all__ = ["ValueLookup", "assign_ids"]


class ValueLookup:
    """Positions of device query columns in a fixed list of unique keys (the CPU class's
    contract: ``keys`` are pandas Series, :meth:`positions` gives the row of ``keys`` each query
    row equals, or -1, as a fresh CuPy int64 array)."""

    def __init__(self, keys: Sequence[Any], op: Any = None, what: Any = None) -> None:
        self.op, self.what = op, what
        kinds = [cpu_lookup._kind_of_dtype(k.dtype) for k in keys]
        self.size = len(keys[0]) if keys else 0
        if len(keys) == 1:
            self.levels = [_device_keys(keys[0], kinds[0])]
            self.combined = None
            return
        # Combinations: one index per column over its distinct values (the order pd.unique gives,
        # which the CPU lookup uses too), and an index of the keys' combined codes, computed once
        # on the host, where the keys are.
        host = cpu_lookup.ValueLookup(keys, op, what)
        uniques = [pd.unique(k.to_numpy() if kind != "str" else k) for k, kind in zip(keys, kinds)]
        self.levels = [_device_keys(pd.Series(u), kind) for u, kind in zip(uniques, kinds)]
        self.combined = IntKeys(host.combined.to_numpy())

    def _combine(self, codes: list[Any]) -> Any:
        cp = backend.cupy()
        out = cp.zeros(len(codes[0]), dtype=cp.int64)
        missing = cp.zeros(len(codes[0]), dtype=bool)
        for code, level in zip(codes, self.levels):
            out = out * max(len(level), 1) + code
            missing |= code < 0
        return cp.where(missing, -1, out)  # not out[missing] = -1: see positions

    def _find(self, level: Any, col: NormalizedColumn) -> Any:
        if len(level) == 0 or col.kind == "null":
            return backend.cupy().full(len(col), -1, dtype=np.int64)
        cpu_lookup.check_query_kind(self.op, self.what, level.kind, col.kind)
        return level.find(col.values)

    def positions(self, cols: Sequence[NormalizedColumn]) -> Any:
        """Row of ``keys`` equal to each query row (-1 where none, and for null rows)."""
        cp = backend.cupy()
        if self.combined is None:
            pos = self._find(self.levels[0], cols[0])
        else:
            combined = self._combine([self._find(level, col) for level, col in zip(self.levels, cols)])
            pos = cp.where(combined >= 0, self.combined.find(combined), -1)
        for c in cols:
            if c.mask is not None:  # where, not pos[mask] = -1: a boolean-mask assignment reads its count back
                pos = cp.where(c.mask, -1, pos)
        return pos


def _device_keys(values: pd.Series, kind: str) -> Any:
    """The device index of one key column (unique values, no nulls) for its kind."""
    if kind == "str":
        return StringKeys(values)
    if kind == "float":
        return FloatKeys(values.to_numpy(dtype=np.float64))
    return IntKeys(values.to_numpy() if kind == "int" else np.zeros(0, np.int64))


class _SortedKeys:
    """Unique numeric keys sorted on the device; a query is a binary search and an equality check."""

    def __init__(self, keys: np.ndarray) -> None:
        cp = backend.cupy()
        device = cp.asarray(keys)
        self.order = cp.argsort(device)
        self.sorted = device[self.order]

    def __len__(self) -> int:
        return len(self.sorted)

    def _search(self, values: Any) -> Any:
        cp = backend.cupy()
        if not len(self.sorted):
            return cp.full(len(values), -1, dtype=cp.int64)
        at = cp.minimum(cp.searchsorted(self.sorted, values), len(self.sorted) - 1)
        return cp.where(self.sorted[at] == values, self.order[at], -1).astype(cp.int64, copy=False)


class IntKeys(_SortedKeys):
    """Unique integer keys (int64, or uint64 whose values >= 2**63 are no negative numbers),
    matched by value as :class:`tabloader.encoding.cpu.lookup.IntKeys` does."""

    kind = "int"

    def __init__(self, keys: np.ndarray) -> None:
        self.dtype = np.dtype(np.uint64 if keys.dtype == np.uint64 else np.int64)
        super().__init__(keys.astype(self.dtype, copy=False))

    def find(self, values: Any) -> Any:
        values, fits = exact_ints(values, self.dtype)  # a query the dtype cannot hold is unseen
        pos = self._search(values)
        return pos if fits is None else backend.cupy().where(fits, pos, -1)  # no mask assignment: see positions


class FloatKeys(_SortedKeys):
    """Unique float64 keys, found by value (an integer query equals the float of its value)."""

    kind = "float"

    def find(self, values: Any) -> Any:
        return self._search(values.astype(np.float64, copy=False))


class StringKeys:
    """Unique string keys on the device, found by a join (``cudf.Index.get_indexer``)."""

    kind = "str"

    def __init__(self, keys: pd.Series) -> None:
        import pyarrow as pa

        cudf = backend.cudf()
        strings = pa.array(pd.Series(keys, dtype=object).to_numpy(), type=pa.string())  # copied to the device once
        self.index = cudf.Index(cudf.Series.from_arrow(strings))

    def __len__(self) -> int:
        return len(self.index)

    def find(self, values: Any) -> Any:
        return backend.cupy().asarray(self.index.get_indexer(values)).astype(np.int64)


def assign_ids(pos: Any, mask: Any, num_buckets: int, cols: Sequence[NormalizedColumn], dtype: Any) -> Any:
    """Ids of the encoding contract from vocabulary positions, on the device (see the CPU
    function: ``pos`` -1 is out of vocabulary, ``cols`` the key columns hashed into the buckets).

    With ``num_buckets > 1`` every row is hashed and the out-of-vocabulary rows take their bucket
    by ``where``: selecting those rows first (``flatnonzero``) reads their count back from the
    device, a wait per column and partition. The columns are hashed as they are (gathering a
    string column by the rows ``0..n-1`` would copy every string first). The ids are the CPU's.
    """
    cp = backend.cupy()
    ids = pos.astype(cp.int64, copy=False) + (OOV_START + num_buckets)  # position -1: the one OOV id when num_buckets == 1
    if num_buckets > 1:
        buckets = (cross_hash(cols) % cp.uint64(num_buckets)).astype(cp.int64) + OOV_START
        ids = cp.where(pos < 0, buckets, ids)
    if mask is not None:
        ids = cp.where(mask, NULL_ID, ids)  # see ValueLookup.positions: no read back
    return ids if ids.dtype == np.dtype(dtype) else ids.astype(dtype)
