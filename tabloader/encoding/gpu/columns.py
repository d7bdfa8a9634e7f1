"""Columns as device arrays: the GPU :class:`NormalizedColumn` and the conversions from cuDF.

The same contract as :mod:`tabloader.encoding.cpu.columns`, with CuPy arrays for numbers and
masks and cuDF string Series (on a RangeIndex) for strings. Nothing here copies to the host.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tabloader import backend
from tabloader.encoding.cpu.columns import _type_error, common_int_dtype, exact_ints, null_mask
from tabloader.encoding.lists import as_list_column

__all__ = ["NormalizedColumn", "normalize_column", "normalize_elements", "null_mask", "map_column", "as_pandas",
           "keys_to_pandas", "common_int_dtype", "exact_ints"]


@dataclasses.dataclass
class NormalizedColumn:
    """A column as device arrays: ``values`` (CuPy int64, uint64 or float64, or a cuDF string
    Series on a RangeIndex), ``mask`` (CuPy bool, True where null, or None) and ``kind`` (``int``,
    ``float``, ``str`` or ``null``), with the meaning of the CPU class of the same name."""

    kind: str
    values: Any
    mask: Any

    def __len__(self) -> int:
        return len(self.values)


def normalize_column(op: Any, name: Any, series: Any) -> NormalizedColumn:
    """Turn a cuDF Series into a :class:`NormalizedColumn`, on the device.

    Raises the TypeError of the CPU implementation (naming the operator, the column and its
    dtype) for dtypes the categorical operators cannot encode.
    """
    from pandas.api import types as pdt

    cp = backend.cupy()
    dtype = series.dtype
    if str(dtype) == "category":  # decategorized: the categories' values, nulls kept
        categories = dtype.categories
        if len(categories) == 0:
            return NormalizedColumn("null", cp.zeros(len(series)), cp.ones(len(series), dtype=bool))
        return normalize_column(op, name, series.astype(categories.dtype))
    if backend.is_list_dtype(dtype):
        raise _type_error(op, name, dtype)
    if pdt.is_bool_dtype(dtype) or pdt.is_integer_dtype(dtype):
        own = np.dtype(getattr(dtype, "numpy_dtype", dtype))
        target = np.dtype(np.uint64 if own == np.uint64 else np.int64)
        # cuDF keeps pandas' nullable dtypes (Int64...) on columns made by from_pandas, and its
        # to_cupy fails on them: cast to the numpy type whenever the dtype is not that type itself.
        numbers = series if dtype == target else series.astype(target)
        if not series.has_nulls:
            return NormalizedColumn("int", numbers.values, None)
        return NormalizedColumn("int", numbers.to_cupy(na_value=0), series.isna().values)
    if pdt.is_float_dtype(dtype):
        values = backend.column_values(series, np.float64)  # a cuDF float column has nulls and NaN: both NaN here
        nan = cp.isnan(values)  # the mask even where it holds no True: asking would wait for the device
        return NormalizedColumn("float", cp.where(nan, 0.0, values), nan)
    if pdt.is_string_dtype(dtype):  # cuDF object columns hold strings only
        if len(series) and series.null_count == len(series):  # no string at all (an arrow null column
            return NormalizedColumn("null", cp.zeros(len(series)), cp.ones(len(series), dtype=bool))  # is one here)
        values = series.reset_index(drop=True)
        return NormalizedColumn("str", values, values.isna().values if values.has_nulls else None)
    raise _type_error(op, name, dtype)


def as_pandas(col: NormalizedColumn) -> Any:
    """The values of a normalized column as grouping takes them (a CuPy array or a cuDF Series)."""
    return col.values


def keys_to_pandas(keys: Any) -> Any:
    """Key values (a CuPy array or a cuDF string Series) on the host, for the fitted tables:
    numbers as a numpy array, strings as a pandas Series (a copy of fitted statistics, made by
    ``finalize``)."""
    import pandas as pd

    host = backend.stats_to_host(keys)
    return pd.Series(host, copy=False).reset_index(drop=True) if isinstance(host, pd.Series) else host


def normalize_elements(op: Any, name: Any, series: Any) -> NormalizedColumn:
    """:func:`normalize_column` of a column's values, or of its elements for a list column."""
    lists = as_list_column(op, name, series)
    return normalize_column(op, name, series if lists is None else backend.list_layout(lists).values)


def map_column(op: Any, name: Any, series: Any, encode: Any, is_list: bool = False) -> Any:
    """Apply ``encode(NormalizedColumn) -> CuPy array`` to a column; list columns element-wise,
    rebuilt on the device with the same offsets and null lists (see the CPU function)."""
    lists = as_list_column(op, name, series, is_list)
    if lists is None:
        return encode(normalize_column(op, name, series))
    layout = backend.list_layout(lists)
    ids = encode(normalize_column(op, name, layout.values))
    return backend.build_list(layout.offsets, ids, layout.valid, lists.index, lists.name, like=lists)
