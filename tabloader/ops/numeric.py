"""Element-wise numeric transforms: :class:`LogOp`, :class:`Clip`, :class:`Bucketize`.

They need no fitting and work column by column on the arrays (numpy on the CPU, CuPy on the
GPU), without copying the inputs.
"""

from __future__ import annotations

import decimal
import functools
import math
from typing import Any, Mapping, Sequence

import numpy as np

from tabloader import backend
from tabloader.ops.base import Columns, Operator, check_numeric, flatten_columns
from tabloader.ops.elementwise import elementwise, holds_list_columns
from tabloader.schema import Schema, Tags


class LogOp(Operator):
    """``log(1 + x)`` of continuous columns (NVTabular's LogOp), tagged ``continuous``.

    Values below -1 give NaN and -1 gives -inf, as ``numpy.log1p`` (no warning is raised):
    put ``Clip(min_value=0)`` before LogOp for counts that may be negative. NaN stays NaN.
    float32 stays float32 (computed as ``log(float64(x) + 1)`` rounded to float32, which equals
    the correctly rounded ``log1p`` for ``|x| >= 1e-8`` and is 2x faster than numpy's float32
    log1p); float64 and integers give float64 via ``numpy.log1p``.

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.numeric import LogOp
        >>> LogOp().transform(["x"], pd.DataFrame({"x": [0.0, 9.0, -1.0]}))["x"].round(4).tolist()
        [0.0, 2.3026, -inf]
    """

    output_tags = (Tags.CONTINUOUS,)
    remove_tags = (Tags.CATEGORICAL,)

    def transform(self, columns: Columns, frame: Any) -> Any:
        cols = flatten_columns(columns)
        check_numeric(self, frame, cols, allow_lists=True)
        if holds_list_columns(frame, cols):  # element-wise, lists kept
            return elementwise(self, frame, cols, self.transform_values)
        out = {col: self.transform_values(col, backend.numeric_values(frame[col])) for col in cols}
        return backend.frame_from_columns(out, frame.index, like=frame)

    def transform_values(self, column: str, values: Any) -> Any:
        """A column's output from its values (a numpy/CuPy array, nulls as NaN), as
        :meth:`transform` computes it; :mod:`tabloader.serving` calls it on request arrays."""
        xp = backend.array_lib(values)
        with np.errstate(invalid="ignore", divide="ignore"):
            if values.dtype == np.float32:
                return _log1p_counts(values) if xp is np else backend.log1p_float32(values)
            return xp.log1p(values, dtype=np.float64)


#: float32 inputs that are integers below this (counts, such as Criteo's continuous columns)
#: take their log from a table: 3x faster than computing it, and the same values.
COUNT_TABLE_SIZE = 1 << 16


@functools.cache
def _log1p_table() -> np.ndarray:
    table = backend.log1p_float32(np.arange(COUNT_TABLE_SIZE, dtype=np.float32))
    table.flags.writeable = False
    return table


def _log1p_counts(values: np.ndarray) -> np.ndarray:
    """:func:`~tabloader.backend.log1p_float32` of a numpy array, by table for the integers ``0 <= x < COUNT_TABLE_SIZE``."""
    counts = values.astype(np.int32)  # NaN, inf and large values give some integer: checked below
    is_count = counts.astype(np.float32) == values
    is_count &= counts.view(np.uint32) < COUNT_TABLE_SIZE  # negatives wrap to large
    if len(values) - np.count_nonzero(is_count) > len(values) // 8:  # mostly not counts: compute them all
        return backend.log1p_float32(values)
    others = np.flatnonzero(~is_count)
    counts[others] = 0
    out = _log1p_table().take(counts)
    out[others] = backend.log1p_float32(values[others])
    return out


class Clip(Operator):
    """Limit values to ``[min_value, max_value]`` (either bound may be None). Tags are kept.

    The dtype is kept: bounds are cast to the column's dtype (for integer columns a fractional
    lower bound is rounded up and an upper bound down, which clips to the same integers; for
    decimal columns the same at the column's scale, a float bound read as written: 0.1 is 0.1).
    NaN stays NaN.

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.numeric import Clip
        >>> Clip(min_value=0).transform(["x"], pd.DataFrame({"x": [-3, 5]}))["x"].tolist()
        [0, 5]
    """

    def __init__(self, min_value: float | None = None, max_value: float | None = None) -> None:
        self.min_value = min_value
        self.max_value = max_value
        if min_value is None and max_value is None:
            raise ValueError("Clip needs min_value, max_value or both")
        if min_value is not None and max_value is not None and min_value > max_value:
            raise ValueError(f"Clip: min_value {min_value} is greater than max_value {max_value}")

    def transform(self, columns: Columns, frame: Any) -> Any:
        cols = flatten_columns(columns)
        check_numeric(self, frame, cols)
        out = {}
        for col in cols:
            series = frame[col]
            if backend.is_decimal_dtype(series.dtype):
                out[col] = series.clip(*self.decimal_bounds(col, series.dtype))
                continue
            if not backend.is_plain_numeric(series):  # nullable / arrow dtypes: the frame library clips
                out[col] = series.clip(*self.bounds(col, _numpy_dtype(series.dtype)))
                continue
            out[col] = self.transform_values(col, backend.column_values(series))
        return backend.frame_from_columns(out, frame.index, like=frame)

    def bounds(self, column: str, dtype: np.dtype) -> tuple[Any, Any]:
        """The bounds as values of ``dtype`` (None where not given); a ValueError when no
        integer of an integer column lies between them."""
        lo, hi = _bound(self.min_value, dtype, math.ceil), _bound(self.max_value, dtype, math.floor)
        if dtype.kind in "iu" and lo is not None and hi is not None and lo > hi:
            raise ValueError(f"Clip: no integer of column {column!r} lies in [{self.min_value}, {self.max_value}]")
        return lo, hi

    def decimal_bounds(self, column: str, dtype: Any) -> tuple[Any, Any]:
        """The bounds as ``decimal.Decimal`` values of decimal ``dtype`` (None where not given):
        at its scale, the lower one rounded up and the upper one down (which clips to the same
        decimals), within what its precision holds; a ValueError when no such decimal lies between them."""
        lo = None if self.min_value is None else backend.decimal_at_scale(self.min_value, dtype, decimal.ROUND_CEILING)
        hi = None if self.max_value is None else backend.decimal_at_scale(self.max_value, dtype, decimal.ROUND_FLOOR)
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"Clip: no value of column {column!r} ({dtype}) lies in [{self.min_value}, {self.max_value}]")
        return lo, hi

    def transform_values(self, column: str, values: Any) -> Any:
        """A column's output from its values (a numpy/CuPy array of its own dtype), as
        :meth:`transform` computes it; :mod:`tabloader.serving` calls it on request arrays."""
        return backend.array_lib(values).clip(values, *self.bounds(column, values.dtype))


def _numpy_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype behind a numpy, pandas-nullable, arrow or cuDF numeric dtype."""
    for candidate in (getattr(dtype, "numpy_dtype", None), dtype):
        if candidate is None:
            continue
        try:
            return np.dtype(candidate)
        except TypeError:
            continue
    return np.dtype("float64")


def _bound(value: float | None, dtype: np.dtype, rounding: Any) -> Any:
    if value is None:
        return None
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if math.isinf(value):
            return info.max if value > 0 else info.min
        return dtype.type(min(max(rounding(value), info.min), info.max))
    return dtype.type(value)


class Bucketize(Operator):
    """Map continuous values to bucket ids ``0 .. len(boundaries)`` (``numpy.digitize`` semantics).

    With increasing boundaries ``b``, a value ``x`` gets id ``i`` when ``b[i-1] <= x < b[i]``
    (intervals closed on the left: ``x == b[i]`` goes up to bucket ``i + 1``); values below
    ``b[0]`` (``-inf`` too) get 0 and values ``>= b[-1]`` (``+inf`` too) get ``len(b)``.

    A null (NaN, None, ``pd.NA``) gets an id of its own, ``len(b) + 1``, so it stays apart from
    the top bucket (``numpy.digitize`` would put NaN there) and the output has no nulls for a
    loader to refuse. Outputs are int64, tagged ``categorical`` (``continuous`` is removed),
    with ``cardinality = len(b) + 2`` (the value buckets and the null id) and ``domain =
    {min: 0, max: len(b) + 1}`` in the schema. Fill nulls first to bucket them as a value.

    Args:
        boundaries: a list of strictly increasing finite numbers for every column, or a dict
            column -> list.

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.numeric import Bucketize
        >>> Bucketize([0, 10]).transform(["x"], pd.DataFrame({"x": [-5, 0, 3, 10, 99]}))["x"].tolist()
        [0, 1, 1, 2, 2]
        >>> Bucketize([0, 10]).transform(["x"], pd.DataFrame({"x": [3.0, None]}))["x"].tolist()  # null: 2 + 1
        [1, 3]
    """

    output_tags = (Tags.CATEGORICAL,)
    remove_tags = (Tags.CONTINUOUS,)

    def __init__(self, boundaries: Sequence[float] | Mapping[str, Sequence[float]]) -> None:
        self.boundaries = boundaries
        for name, b in (boundaries.items() if isinstance(boundaries, Mapping) else [(None, boundaries)]):
            _check_boundaries(b, name)

    def _boundaries_of(self, col: str) -> np.ndarray:
        if isinstance(self.boundaries, Mapping):
            if col not in self.boundaries:
                raise KeyError(f"Bucketize has no boundaries for column {col!r}; it has {list(self.boundaries)}")
            return np.asarray(self.boundaries[col], dtype=np.float64)
        return np.asarray(self.boundaries, dtype=np.float64)

    def transform(self, columns: Columns, frame: Any) -> Any:
        cols = flatten_columns(columns)
        check_numeric(self, frame, cols, allow_lists=True)
        if holds_list_columns(frame, cols):  # element-wise, lists kept
            return elementwise(self, frame, cols, self.transform_values)
        out = {col: self.transform_values(col, backend.numeric_values(frame[col])) for col in cols}
        return backend.frame_from_columns(out, frame.index, like=frame)

    def transform_values(self, column: str, values: Any) -> Any:
        """A column's output from its values (a numpy/CuPy array, nulls as NaN), as
        :meth:`transform` computes it; :mod:`tabloader.serving` calls it on request arrays."""
        xp = backend.array_lib(values)
        bounds = xp.asarray(self._boundaries_of(column))
        ids = xp.searchsorted(bounds, values, side="right").astype(np.int64)
        if values.dtype.kind == "f":  # nulls are NaN here (numeric_values); integer arrays have none
            ids[xp.isnan(values)] = len(bounds) + 1
        return ids

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        out = []
        for col in super().compute_output_schema(input_schema, columns):
            card = len(self._boundaries_of(col.name)) + 2  # value buckets 0..len(b), then the null id
            out.append(col.with_properties(cardinality=card, domain={"min": 0, "max": card - 1}))
        return Schema(out)


def _check_boundaries(b: Any, name: str | None) -> None:
    arr = np.asarray(b, dtype=np.float64)
    where = f" for column {name!r}" if name is not None else ""
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"Bucketize boundaries{where} must be a non-empty list of numbers, got {b!r}")
    if not np.isfinite(arr).all() or not (np.diff(arr) > 0).all():
        raise ValueError(f"Bucketize boundaries{where} must be finite and strictly increasing, got {b!r}")

