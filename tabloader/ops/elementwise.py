"""Numeric operators on list columns: the operator's scalar computation applied to every
element, the lists kept (NVTabular's LogOp / Normalize / NormalizeMinMax on list columns).

A list column is an ArrowDtype (or cuDF) list column, or an object column of Python lists or
numpy arrays (see :mod:`tabloader.encoding.lists`). Its elements are flattened with
:func:`tabloader.backend.list_flatten`, computed on as one array, and put back under the
original offsets: a null list stays a null list, a null element becomes NaN.

Example:
    >>> import pandas as pd, pyarrow as pa
    >>> frame = pd.DataFrame({"l": pd.Series([[1.0, 3.0], None], dtype=pd.ArrowDtype(pa.list_(pa.float64())))})
    >>> elementwise(object(), frame, ["l"], lambda col, values: values * 2)["l"].tolist()
    [[2.0, 6.0], <NA>]
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from tabloader import backend
from tabloader.encoding.lists import as_list_column, holds_lists


def holds_list_columns(frame: Any, columns: Sequence[str]) -> bool:
    """True when one of ``columns`` of ``frame`` is a list column."""
    return any(holds_lists(frame[c]) for c in columns)


def list_elements(op: Any, name: str, series: Any) -> Any:
    """The elements of a list column as one column (nulls kept); other columns as they are."""
    lists = as_list_column(op, name, series)
    return series if lists is None else backend.list_flatten(lists)[0]


def elementwise(op: Any, frame: Any, columns: Sequence[str], compute: Callable[[str, Any], Any]) -> Any:
    """A frame of ``compute(column, values)`` per column (``values`` a numpy/CuPy array, nulls as
    NaN): list columns element-wise, lists kept; other columns as a whole."""
    out = {}
    for col in columns:
        lists = as_list_column(op, col, frame[col])
        if lists is None:
            out[col] = compute(col, backend.numeric_values(frame[col]))
        else:
            values, rebuild = backend.list_flatten(lists)
            out[col] = rebuild(compute(col, backend.numeric_values(values)))
    return backend.frame_from_columns(out, frame.index, like=frame)
