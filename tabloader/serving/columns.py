"""Columns inside the serving fast path: reading a request as the workflow's input schema says,
and converting to and from the DataFrame path's pandas Series and the model's arrays.

Example:
    >>> col = column_reader("float32", False)("x", [1.5, None])
    >>> col.values.dtype, col.values.tolist()
    (dtype('float32'), [1.5, nan])
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np
import pandas as pd

from tabloader import backend


class Unsupported(Exception):
    """A fast path was given inputs it does not take: its node runs the DataFrame path."""


@dataclasses.dataclass(slots=True)
class Column:
    """One column of a request inside the fast path.

    ``values``: a numpy array (numbers and booleans, in the column's dtype; floats hold nulls as
    NaN), a pyarrow string array, or a pyarrow list array; or a pandas Series for what the fast
    path does not represent. ``mask``: True where a nullable integer/boolean column is null
    (None when none is). ``nullable``: the column is a pandas nullable dtype (``Int64``...),
    which operators see as float64 with NaN.
    """

    values: Any
    mask: np.ndarray | None = None
    nullable: bool = False

    @property
    def kind(self) -> str:
        if isinstance(self.values, np.ndarray):
            return "number"
        if isinstance(self.values, pd.Series):
            return "series"
        import pyarrow as pa

        return "list" if pa.types.is_list(self.values.type) or pa.types.is_large_list(self.values.type) else "string"


# Requests: typed by the workflow's input schema.
def _is_null(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _bad_value(name: str, dtype: Any, value: Any) -> TypeError:
    value = value.item() if isinstance(value, np.generic) else value
    return TypeError(f"request column {name!r} holds {value!r} ({type(value).__name__}), which its dtype at fit, "
                     f"{dtype}, cannot hold")


def column_reader(dtype: str | None, is_list: bool) -> Callable[[str, Any], Column]:
    """How a request column is read, decided once per column: as ``dtype``, its dtype at fit
    (a list column of that element dtype when ``is_list``). The reader takes the column's name
    and values; values the dtype cannot hold raise a TypeError naming the column and the value.

    Example:
        >>> col = column_reader("int64", False)("a", [5, None])
        >>> col.values.dtype, col.mask.tolist(), col.nullable
        (dtype('int64'), [False, True], True)
    """
    try:
        numpy_dtype = np.dtype(dtype) if dtype not in (None, "string") else None
    except TypeError:
        numpy_dtype = None
    if is_list or dtype == "string":
        return lambda name, values: Column(_arrow_values(name, _sequence(name, values), dtype, is_list))
    if numpy_dtype is not None and numpy_dtype.kind in "biuf":
        return lambda name, values: _numbers(name, _sequence(name, values), numpy_dtype)
    if str(dtype).startswith("datetime64"):  # as at fit, whatever the request holds: all nulls, ISO text
        return lambda name, values: Column(_times(name, _sequence(name, values), str(dtype)))
    return lambda name, values: Column(pd.Series(_sequence(name, values)))  # read as pandas infers


def _times(name: str, values: Any, dtype: str) -> pd.Series:
    try:
        return pd.Series(values, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"request column {name!r} cannot be read as {dtype}, its dtype at fit: {exc}") from None


def _sequence(name: str, values: Any) -> Any:
    if isinstance(values, (list, np.ndarray, tuple)):
        return values
    if isinstance(values, pd.Series):
        return values.to_numpy()
    raise TypeError(f"request column {name!r} must be a list or a numpy array, got {type(values).__name__}")


def _arrow_values(name: str, values: Any, dtype: str | None, is_list: bool) -> Any:
    import pyarrow as pa

    element = pa.string() if dtype in (None, "string") else pa.from_numpy_dtype(np.dtype(dtype))
    try:
        return pa.array(values, type=pa.list_(element) if is_list else element, from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        kind = f"list<{dtype}>" if is_list else dtype
        raise TypeError(f"request column {name!r} cannot be read as {kind}, its dtype at fit: {exc}") from exc


_NUMBER_TYPES = (int, float, np.number, np.bool_)  # bool is an int
# What pandas.api.types.infer_dtype says of columns of numbers (nulls skipped).
_NUMERIC_INFERRED = ("integer", "floating", "mixed-integer-float", "boolean", "integer-na", "empty", "decimal")


def _numbers(name: str, values: Any, dtype: np.dtype) -> Column:
    arr = values if isinstance(values, np.ndarray) else np.asarray(values)
    if arr.dtype == dtype:  # the common case: nothing to check
        return Column(arr)
    mask = None
    if arr.dtype.kind == "f" and dtype.kind in "iu" and not isinstance(values, np.ndarray):
        arr = np.asarray(values, dtype=object)  # numpy reads a list with an integer beyond int64 as floats
    if arr.dtype == object:  # nulls among the values, values of several kinds, or integers beyond 64 bits
        arr, mask = _object_numbers(name, arr, dtype)
    if arr.dtype.kind not in "biuf":
        raise _bad_value(name, dtype, _first_non_number(values))
    if dtype.kind == "f":
        if arr.dtype.kind == "b":
            raise _bad_value(name, dtype, arr.reshape(-1)[0])
        return Column(arr.astype(dtype, copy=False))  # nulls are NaN already
    if arr.dtype.kind == "f":  # JSON numbers: NaN is a null, the rest must be integers
        nan = np.isnan(arr)
        mask = nan if mask is None else (mask | nan)
        arr = np.where(nan, 0.0, arr)
    _check_fits(name, arr, dtype)
    out = arr.astype(dtype, copy=False)
    if mask is not None and not mask.any():
        mask = None
    return Column(out, mask, nullable=mask is not None)


def _first_non_number(values: Any) -> Any:
    """The first value of a request column that is neither a number nor a null (for errors)."""
    return next((v for v in values if not _is_null(v) and not isinstance(v, _NUMBER_TYPES)), values[0])


def _object_numbers(name: str, arr: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """An object array of numbers and nulls as a numeric array (nulls as NaN, or 0 under the
    mask for integers beyond what a float64 holds exactly) and its null mask."""
    inferred = pd.api.types.infer_dtype(arr, skipna=True)
    if inferred not in _NUMERIC_INFERRED:
        raise _bad_value(name, dtype, _first_non_number(arr))
    if inferred == "boolean" or inferred == "empty" and dtype.kind == "b":
        nulls = pd.isna(arr)
        return np.where(nulls, False, arr).astype(bool), nulls if nulls.any() else None
    try:
        floats = arr.astype(np.float64)  # None and NaN become NaN
    except TypeError:  # pd.NA
        floats = np.where(pd.isna(arr), np.nan, arr).astype(np.float64)
    nan = np.isnan(floats)
    mask = nan if nan.any() else None
    if dtype.kind == "f" or inferred != "integer" and inferred != "integer-na" or \
            np.abs(floats[~nan]).max(initial=0) < 2.0**53:  # integers a float64 holds exactly
        return floats, mask
    exact = np.where(nan, 0, arr)
    for wide in (np.int64, np.uint64):
        try:
            return exact.astype(wide), mask
        except OverflowError:
            continue
    raise _bad_value(name, dtype, next(v for v in exact if not -2**63 <= v < 2**64))


def _check_fits(name: str, arr: np.ndarray, dtype: np.dtype) -> None:
    """Raise a TypeError naming the first value of ``arr`` that ``dtype`` (integer or bool) cannot hold."""
    if dtype.kind == "b":
        fits = np.ones(arr.shape, bool) if arr.dtype.kind == "b" else np.zeros(arr.shape, bool)
    elif arr.dtype.kind == "b":
        fits = np.zeros(arr.shape, bool)  # pandas refuses booleans in an integer column
    else:
        info = np.iinfo(dtype)
        if arr.dtype.kind == "f":
            fits = (np.floor(arr) == arr) & (arr >= float(info.min)) & (arr <= float(info.max))
        else:
            fits = (arr >= info.min) & (arr <= info.max) if arr.dtype != dtype else np.ones(arr.shape, bool)
    if not fits.all():
        raise _bad_value(name, dtype, arr[np.flatnonzero(~fits)[0]].item())


def as_series(col: Column) -> pd.Series:
    """The pandas Series a fast-path column stands for (what the DataFrame path sees)."""
    kind = col.kind
    if kind == "series":
        return col.values
    if kind == "number":
        if not col.nullable:
            return pd.Series(col.values)
        mask = col.mask if col.mask is not None else np.zeros(len(col.values), bool)
        array_type = pd.arrays.BooleanArray if col.values.dtype.kind == "b" else pd.arrays.IntegerArray
        return pd.Series(array_type(col.values.copy(), mask.copy()))
    if kind == "string":
        return pd.Series(col.values.to_pandas())
    return backend.list_column_from_arrow(col.values, pd.RangeIndex(len(col.values)), None)


def from_series(series: pd.Series) -> Column:
    """A fast-path column of a DataFrame-path column (the Series kept where there is none)."""
    dtype = series.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
        return Column(series.to_numpy())
    if isinstance(series.array, (pd.arrays.IntegerArray, pd.arrays.BooleanArray)):
        mask = series.isna().to_numpy()
        values = series.array.to_numpy(dtype=dtype.numpy_dtype, na_value=dtype.numpy_dtype.type(0))
        return Column(values, mask if mask.any() else None, nullable=True)
    if isinstance(dtype, pd.StringDtype) or backend.is_list_dtype(dtype):
        return Column(backend.list_column_to_arrow(series) if backend.is_list_dtype(dtype) else _arrow_strings(series))
    return Column(series)


def _arrow_strings(series: pd.Series) -> Any:
    import pyarrow as pa

    arr = pa.array(series.array, type=pa.string(), from_pandas=True)
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def numeric_values(col: Column) -> np.ndarray:
    """What :func:`tabloader.backend.numeric_values` gives for the column: its own array, or
    float64 with NaN for a nullable one; Unsupported for what numeric operators refuse."""
    if not isinstance(col.values, np.ndarray) or col.values.dtype.kind == "b":
        raise Unsupported("not a numeric column")
    if not col.nullable:
        return col.values
    out = col.values.astype(np.float64)
    if col.mask is not None:
        out[col.mask] = np.nan
    return out


def from_arrow_elements(values: Any) -> Column:
    """The elements of a list column as a column (integers with nulls: nullable, as
    :func:`tabloader.backend.list_flatten` reads them)."""
    import pyarrow as pa

    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return Column(values.cast(pa.string()))
    if pa.types.is_floating(values.type):
        return Column(values.to_numpy(zero_copy_only=False))
    if not (pa.types.is_integer(values.type) or pa.types.is_boolean(values.type)):
        raise Unsupported("list elements of another type")
    mask = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None
    filled = values.fill_null(False if pa.types.is_boolean(values.type) else 0) if mask is not None else values
    return Column(filled.to_numpy(zero_copy_only=False), mask, nullable=mask is not None)


def _first_null_list(lists: Any, offsets: np.ndarray, flat: Any) -> str:
    """Where the first null of a list column (pyarrow) is, in words: a null list, or a null
    element, and its row."""
    null_rows = np.flatnonzero(lists.is_null().to_numpy(zero_copy_only=False))
    null_elements = np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False)) + offsets[0]
    rows_with_null_elements = np.searchsorted(offsets, null_elements, side="right") - 1
    first_list = int(null_rows[0]) if null_rows.size else len(offsets)
    first_element = int(rows_with_null_elements[0]) if rows_with_null_elements.size else len(offsets)
    if first_list <= first_element:
        return f"a null list in row {first_list}"
    return f"a null element in row {first_element}"


def model_array(name: str, col: Column) -> Any:
    """A numpy array (a ``(values, offsets)`` pair for a list column) of an output column; a
    ValueError naming it where a null has no place (integers, booleans, lists)."""
    if col.mask is None and isinstance(col.values, np.ndarray):  # the common case first
        return col.values
    kind = col.kind
    if kind == "number":
        if col.mask is not None and col.mask.any():
            raise ValueError(f"output column {name!r} has a null in row {int(np.flatnonzero(col.mask)[0])}: fill it "
                             "in the workflow (FillMissing, or Categorify's null id)")
        return col.values
    if kind == "list":
        arr = col.values
        offsets = arr.offsets.to_numpy().astype(np.int64)
        flat = arr.values.slice(offsets[0], offsets[-1] - offsets[0])
        if arr.null_count or flat.null_count:
            raise ValueError(f"output column {name!r} holds {_first_null_list(arr, offsets, flat)}: fill it in the "
                             "workflow (FillMissing)")
        elements = from_arrow_elements(flat)
        if elements.kind != "number":
            raise TypeError(f"output column {name!r} holds lists of strings; encode it in the workflow (Categorify)")
        return elements.values, offsets - offsets[0]
    raise TypeError(f"output column {name!r} is not numeric ({kind}); encode it in the workflow or leave it out")


