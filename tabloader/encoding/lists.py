"""List (multi-hot) columns: recognizing them and converting object columns of lists (their
offsets, elements and lengths come from :func:`tabloader.backend.list_layout`).

List columns are pandas ``ArrowDtype(list<...>)`` columns on the CPU (what tabloader's readers
produce; columns of Python lists are accepted too) and cuDF list columns on the GPU; the
differences go through :mod:`tabloader.backend`. Nothing here works on Python objects per row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.encoding.contract import label_of

#: What a row of an object column of lists holds: Python lists (serving requests), numpy arrays
#: (``pd.read_parquet`` of a list column) or tuples.
LIST_ROW_TYPES = (list, tuple, np.ndarray)


def _is_missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def holds_lists(series: Any) -> bool:
    """True for a list column: ArrowDtype or cuDF lists, or a pandas object column whose first
    non-null row is a list, a tuple or a numpy array.

    Example:
        >>> holds_lists(pd.Series([None, [1, 2]])), holds_lists(pd.Series(["a", "b"]))
        (True, False)
    """
    if backend.is_list_dtype(series.dtype):
        return True
    if series.dtype != object or backend.is_gpu_object(series):  # cuDF object columns hold strings
        return False
    first = next((v for v in series.array if not _is_missing(v)), None)  # stops at the first row with a value
    return isinstance(first, LIST_ROW_TYPES)


def as_list_column(op: Any, name: Any, series: Any, is_list: bool = False) -> Any:
    """``series`` as a list column (ArrowDtype on the CPU, cuDF lists on the GPU), or None when
    it is not one (see :func:`holds_lists`).

    An object column of lists is converted through :func:`tabloader.backend.list_column_to_arrow`;
    None, NaN and ``pd.NA`` rows become null lists. ``is_list`` says the column is known to be a
    list column (a fitted operator saw lists in it): a column without any list row then gives
    null lists when all its rows are null (a request holding only a null list reads as
    ``[None]`` or ``[NaN]``), and a TypeError otherwise. Rows mixing lists and scalars raise a
    TypeError too; both name the operator and the column.

    Example:
        >>> as_list_column("op", "l", pd.Series([[1, None], float("nan"), []])).tolist()
        [[1, None], <NA>, []]
        >>> as_list_column("op", "l", pd.Series([float("nan")]), is_list=True).tolist()
        [<NA>]
    """
    import pyarrow as pa

    label = label_of(op)
    if backend.is_list_dtype(series.dtype):
        return series
    if not holds_lists(series):
        if not is_list:
            return None
        if not series.isna().all():
            raise TypeError(f"{label}: column {name!r} held lists at fit but now holds {series.dtype} values")
        return backend.list_column_from_arrow(pa.nulls(len(series), pa.list_(pa.null())), series.index, series.name,
                                              like=series)
    try:
        arr = backend.list_column_to_arrow(series.where(series.notna(), None))
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise TypeError(f"{label}: column {name!r} holds lists in some rows and other values in others ({exc})") from exc
    return backend.list_column_from_arrow(arr, series.index, series.name)


def list_column(op: Any, frame: Any, col: str) -> Any:
    """Column ``col`` of ``frame`` as a list column (see :func:`as_list_column`); a TypeError
    naming the operator, column and dtype when it is not one.

    Example:
        >>> list_column("op", pd.DataFrame({"l": [[1], [2, 3]]}), "l").tolist()
        [[1], [2, 3]]
    """
    series = as_list_column(op, col, frame[col])
    if series is None:
        raise TypeError(f"{label_of(op)} needs list columns, but column {col!r} has dtype {frame[col].dtype}")
    return series
