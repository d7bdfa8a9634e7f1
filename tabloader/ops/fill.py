"""Null filling: :class:`FillMissing` (a constant) and :class:`FillMedian` (the fitted median).

Both can add, per column, a ``<col>_filled`` indicator: a **bool** column, True where the
input was null (NaN/None/NA) and got filled. Only nulls are filled; +-inf stays as it is
(use :class:`~tabloader.ops.numeric.Clip` for those). FillMissing fills list columns too
(null lists, and null elements inside lists).
"""

from __future__ import annotations

import datetime
import decimal
import warnings
from typing import Any

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.encoding.lists import LIST_ROW_TYPES, as_list_column
from tabloader.ops.base import Columns, StatOperator, Operator, check_numeric, flatten_columns
from tabloader.ops.sketch import DEFAULT_RELATIVE_ACCURACY, QuantileSketch
from tabloader.schema import ColumnSchema, Schema, Tags

FILLED_SUFFIX = "_filled"


def _fill(op: Operator, columns: Columns, frame: Any, values: dict[str, Any], float_fallback: bool = False) -> Any:
    """``frame[cols]`` with nulls replaced by ``values[col]``, plus the ``_filled`` indicators.

    With ``float_fallback``, a nullable integer column whose fill value is not an integer (a
    median of 2.5) becomes float64 (in every partition, with or without nulls), and so does a
    decimal column, and a whole value fills an integer column within its range (see
    :func:`_statistic_fill`).
    """
    out: dict[str, Any] = {}
    indicators: dict[str, Any] = {}
    for col in flatten_columns(columns):
        series = backend.arrow_nans_as_nulls(frame[col])  # a NaN is missing in an arrow float column too
        if op.add_binary_cols:
            indicators[col + FILLED_SUFFIX] = series.isna()
        value = values[col]
        lists = as_list_column(op, col, series, is_list=is_list_value(value))
        if lists is not None:
            out[col] = _fill_lists(op, col, lists, value)
            continue
        if float_fallback:
            series, value = _statistic_fill(series, value)
        if _is_float(series.dtype) and _is_real_number(value):
            # The number in the column's dtype, as pandas 3's fillna casts a Python number (pandas 2 turned
            # float32 to float64 for a Python 0.1; pandas 3 too for a numpy float64), in one pass (fillna
            # goes through Block.where: 10x the time; cuDF's waits for the device).
            with np.errstate(over="ignore"):
                out[col] = backend.float_values_filled(series, series.dtype.type(value))
            continue
        if backend.is_decimal_dtype(series.dtype) and (_is_real_number(value) or isinstance(value, decimal.Decimal)):
            value = _as_decimal(op, col, series, value)
        out[col] = _filled_in_its_dtype(op, col, series, value, check_always=not float_fallback)
    out.update(indicators)
    return backend.frame_from_columns(out, frame.index, like=frame)


def _statistic_fill(series: Any, value: float) -> tuple[Any, Any]:
    """The column and value with which a fitted statistic (a float) fills ``series``.

    The column becomes float64 when it is a decimal one (as a decimal the statistic would be
    rounded to the column's scale, or refused) or a nullable integer one whose value is not a
    whole number (decided by the fitted value, so every partition gets the same dtype). A whole
    value fills an integer column as an integer of its range: the float64 median of int64 values
    near 2**63 rounds up to 2**63, beyond them.
    """
    whole = float(value).is_integer()
    if backend.is_decimal_dtype(series.dtype) or (backend.nullable_integers(series) and not whole):
        return series.astype("float64"), value
    if whole and getattr(series.dtype, "kind", "") in ("i", "u"):
        info = _integer_range(series.dtype)
        return series, min(max(int(value), int(info.min)), int(info.max))
    return series, value


def _integer_range(dtype: Any) -> np.iinfo:
    """The range of an integer dtype: numpy's, pandas' nullable or arrow-backed, or cuDF's."""
    return np.iinfo(np.dtype(getattr(dtype, "numpy_dtype", dtype)))


def _is_float(dtype: Any) -> bool:
    """A numpy float dtype (pandas' NaN-for-null floats, cuDF's float columns)."""
    return isinstance(dtype, np.dtype) and dtype.kind == "f"


def _is_real_number(value: Any) -> bool:
    """A Python or numpy int or float (not a bool)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _as_decimal(op: Operator, col: str, series: Any, value: Any) -> decimal.Decimal:
    """The number ``value`` as a decimal of the column's dtype (0.5 as 0.50 in a decimal(10, 2):
    pandas refuses a float), refused unless the dtype holds it exactly."""
    exact = backend.decimal_at_scale(value, series.dtype)
    if exact is None:
        precision, scale = backend.decimal_precision_scale(series.dtype)
        raise _cannot_fill(op, col, series, value, f"a decimal of precision {precision} and scale {scale} does not "
                                                   "hold it exactly")
    return exact


def _filled_in_its_dtype(op: Operator, col: str, series: Any, value: Any, check_always: bool = True) -> Any:
    """``series.fillna(value)``, refused with a TypeError unless ``value`` fits the column's dtype.

    pandas would turn the column into objects of mixed types (``"unknown"`` in a float column,
    ``0`` in a datetime one) or into another dtype, neither of which the output schema says;
    pandas 2 and cuDF fill some such values quietly (1000 wrapped into an Int8 column, ``"5"`` as
    5): those are checked on the host first. A null row of the dtype is filled too, so that a
    partition without nulls is refused as one with them (not for integers, checked on the host
    whole: on cuDF that fill reads the value's range back from the device). A column that holds
    no null (numpy integers, booleans) has nothing to fill: its check is the host's alone, and a
    fitted statistic (``check_always`` off: FillMedian's fractional median) is not checked there.
    """
    if isinstance(value, (datetime.datetime, datetime.timedelta)):  # cuDF takes pandas' times, not Python's
        value = pd.Timestamp(value) if isinstance(value, datetime.datetime) else pd.Timedelta(value)
    fillable = len(series) and _holds_nulls(series)  # a numpy integer or boolean column has nothing to fill
    why = not_held_exactly(series.dtype, value) if len(series) and (fillable or check_always) else None
    if why:
        raise _cannot_fill(op, col, series, value, why)
    null_row = _null_row(series) if fillable and getattr(series.dtype, "kind", "") not in "iu" else None
    try:
        filled = [series.fillna(value)] + ([] if null_row is None else [null_row.fillna(value)])
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: 1000 in an Int8 column
        raise _cannot_fill(op, col, series, value, str(exc)) from exc
    changed = [f.dtype for f in filled if f.dtype != series.dtype]
    if changed:
        raise _cannot_fill(op, col, series, value, f"it does not fit the dtype (the column would become {changed[0]})")
    return filled[0]


def not_held_exactly(dtype: Any, value: Any) -> str | None:
    """Why a numeric, boolean or datetime ``dtype`` cannot hold ``value`` as it is, where pandas 2
    or cuDF would fill it anyway: text in a number column (cuDF parses ``"5"``), an integer
    beyond the dtype's range (1000 wrapped to -24 in an Int8 column), a fraction in an integer
    column, a time finer than the dtype's unit (half a second truncated in a column of seconds);
    else None."""
    kind = getattr(dtype, "kind", "")
    if kind and kind in "iufb" and isinstance(value, (str, bytes)):
        return "text in a column of numbers"
    if kind and kind in "iu" and _is_real_number(value):
        if not float(value).is_integer():
            return "it is not a whole number"
        info = _integer_range(dtype)
        return None if info.min <= int(value) <= info.max else f"it is outside the range of {dtype}"
    if kind and kind in "mM" and isinstance(value, (datetime.datetime, datetime.timedelta, np.datetime64,
                                                   np.timedelta64)):
        unit = np.datetime_data(np.dtype(getattr(dtype, "base", dtype)))[0]
        time = pd.Timestamp(value) if kind == "M" else pd.Timedelta(value)
        if unit != "ns" and time != time.floor(pd.Timedelta(1, unit=unit)):
            return "it is finer than the column's time unit"
    return None


def _holds_nulls(series: Any) -> bool:
    """Whether the column's dtype can hold a null: not a pandas numpy integer or boolean one."""
    dtype = series.dtype
    return backend.is_gpu_object(series) or not (isinstance(dtype, np.dtype) and dtype.kind in "iub")


def _null_row(series: Any) -> Any:
    """The column's first row as a null of its dtype."""
    first = series.iloc[:1]
    return first.where(first.isna())


def _cannot_fill(op: Operator, col: str, series: Any, value: Any, why: str) -> TypeError:
    return TypeError(f"{op.label} cannot fill column {col!r} (dtype {series.dtype}) with {value!r}: {why}")


def is_list_value(value: Any) -> bool:
    return isinstance(value, LIST_ROW_TYPES)


def _fill_lists(op: Operator, col: str, series: Any, value: Any) -> Any:
    """A list column with null lists replaced by ``value`` when it is a list (else by ``[]``),
    and null or NaN elements by ``value`` when it is a scalar."""
    import pyarrow as pa

    layout = backend.list_layout(series)
    fill_list = list(value) if is_list_value(value) else []
    xp = backend.array_lib(layout.offsets)
    try:
        values = layout.values if fill_list else backend.fill_null_elements(layout.values, value)
        if fill_list:
            values = backend.concat_values(values, fill_list)  # a null row takes these, appended
        starts = xp.where(layout.valid, layout.offsets[:-1], len(layout.values))
        offsets, take, _ = backend.run_positions(xp.where(layout.valid, layout.lengths, len(fill_list)), starts)
        filled = backend.take_values(values, take)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise TypeError(f"{op.label} cannot fill list column {col!r} (dtype {series.dtype}) with {value!r}: "
                        f"{exc}") from exc
    return backend.build_list(offsets, filled, None, series.index, series.name, like=series)


def _fill_output_names(op: Any, columns: Columns) -> list[str]:
    cols = flatten_columns(columns)
    return cols + [c + FILLED_SUFFIX for c in cols] if op.add_binary_cols else cols


def _fill_output_schema(op: Operator, input_schema: Schema, columns: Columns) -> Schema:
    out = []
    for col in flatten_columns(columns):
        base = input_schema[col] if col in input_schema else ColumnSchema(col)
        if op.output_tags:
            base = base.with_tags(*op.output_tags)
        out.append(base)
    if op.add_binary_cols:
        for col in out[:]:  # one flag a row: a list column's LIST tag is not the flag's
            tags = (col.tags - {str(Tags.LIST)}) | {str(Tags.BINARY)}
            out.append(ColumnSchema(col.name + FILLED_SUFFIX, "bool", tags))
    return Schema(out)


class FillMissing(Operator):
    """Replace nulls with a constant, optionally adding ``<col>_filled`` bool indicators.

    Works on any dtype the constant fits (numeric, string, nullable), and keeps it: a number
    fills a float column as a number of its dtype (0.1 as float32 0.1 in a float32 column) and a
    decimal column as a decimal of its scale (0.5 as 0.50 in a decimal(10, 2)); a constant the
    dtype cannot hold (text in a float column, a number in a datetime one, 0.125 in a decimal of
    scale 2) raises a TypeError naming the column, even in a partition without nulls. Tags are kept; an
    indicator column carries its column's tags plus ``binary`` (less ``list``: it has one flag a row).

    List columns (ArrowDtype or cuDF lists, or object columns of Python lists / numpy arrays)
    come out as list columns (ArrowDtype on the CPU) whatever the constant is:

    * a scalar ``fill_val`` (the default 0) fills null (and NaN) *elements* inside the lists,
      and a null list becomes an empty list ``[]``;
    * a list ``fill_val=[...]`` replaces each null list by that list (elements cast to the
      column's element type); elements are left as they are.

    Either way the loader then takes the column (it refuses null lists and null elements).

    Args:
        fill_val: the replacement value (a list for list columns, see above).
        add_binary_cols: also output ``<col>_filled`` (bool, True where a null -- for list
            columns, a null list -- was filled).

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.fill import FillMissing
        >>> df = pd.DataFrame({"x": [1.0, None, 3.0]})
        >>> out = FillMissing(0, add_binary_cols=True).transform(["x"], df)
        >>> out["x"].tolist(), out["x_filled"].tolist()
        ([1.0, 0.0, 3.0], [False, True, False])
        >>> lists = pd.DataFrame({"l": [[1, None], None]})
        >>> [list(v) for v in FillMissing().transform(["l"], lists)["l"]]
        [[1, 0], []]
        >>> [list(v) for v in FillMissing([-1]).transform(["l"], lists)["l"]]
        [[1, None], [-1]]
    """

    device_note = "cuDF `fillna`; list columns through their device offsets and elements."

    def __init__(self, fill_val: Any = 0, add_binary_cols: bool = False) -> None:
        self.fill_val = fill_val
        self.add_binary_cols = add_binary_cols

    def transform(self, columns: Columns, frame: Any) -> Any:
        return _fill(self, columns, frame, {c: self.fill_val for c in flatten_columns(columns)})

    def output_column_names(self, columns: Columns) -> list[str]:
        return _fill_output_names(self, columns)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        return _fill_output_schema(self, input_schema, columns)


class FillMedian(StatOperator):
    """Replace nulls with each column's median, learned with a mergeable quantile sketch.

    The median is exact while a column has at most 4096 finite values and otherwise within
    ``relative_accuracy * |median|`` of ``numpy.median`` of the finite values (see
    :mod:`tabloader.ops.sketch` for the precise bound). NaN and +-inf are left out of the
    statistics. A column without any finite value gets a NaN median (a warning names it), so
    its nulls stay null. Decimal columns come out as float64 (the median is a float), and so do
    nullable integer columns whose median is not a whole number; a whole median fills an integer
    column in its dtype (within its range: the float64 median of int64 values near 2**63 is
    2**63, taken as int64's largest). Outputs are tagged ``continuous``.

    Args:
        add_binary_cols: also output ``<col>_filled`` (bool, True where a null was filled).
        relative_accuracy: the sketch's relative error bound (default 0.001).

    Fitted attributes: ``medians_`` (dict column -> float).

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> from tabloader.ops.fill import FillMedian
        >>> wf = tl.Workflow(["x"] >> FillMedian(), progress=False)
        >>> wf.fit_transform(pd.DataFrame({"x": [1.0, None, 3.0, 10.0]}))["x"].tolist()
        [1.0, 3.0, 3.0, 10.0]
    """

    device_note = ("Sketches each partition on the GPU; only the sketch (up to 4096 values, or its bucket counts) "
                   "reaches the host.")

    output_tags = (Tags.CONTINUOUS,)

    def __init__(self, add_binary_cols: bool = False, relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY) -> None:
        self.add_binary_cols = add_binary_cols
        self.relative_accuracy = relative_accuracy

    def fit_partial(self, columns: Columns, frame: Any) -> dict[str, QuantileSketch]:
        cols = flatten_columns(columns)
        check_numeric(self, frame, cols)
        return {c: QuantileSketch.from_values(backend.column_values(frame[c], "float64"), self.relative_accuracy)
                for c in cols}

    def merge(self, left: dict, right: dict) -> dict:
        return {c: left[c].merge(right[c]) for c in left}

    def finalize(self, columns: Columns, merged: dict) -> None:
        medians = {c: float(s.quantile(0.5)) for c, s in merged.items()}
        empty = [c for c, s in merged.items() if s.count == 0]
        if empty:
            warnings.warn(f"FillMedian: column(s) {empty} have no finite value; their median is NaN and their "
                          "nulls stay null", RuntimeWarning, stacklevel=2)
        self.medians_ = medians

    def transform(self, columns: Columns, frame: Any) -> Any:
        self.check_is_fitted(columns)
        cols = flatten_columns(columns)
        self.check_fitted_on(cols, self.medians_)
        check_numeric(self, frame, cols)
        return _fill(self, columns, frame, self.medians_, float_fallback=True)

    def output_column_names(self, columns: Columns) -> list[str]:
        return _fill_output_names(self, columns)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        return _fill_output_schema(self, input_schema, columns)

    def get_state(self) -> dict[str, Any]:
        return {"medians": self.medians_} if self.is_fitted else {}

    def set_state(self, state: dict[str, Any]) -> None:
        if "medians" in state:
            self.medians_ = {k: float(v) for k, v in state["medians"].items()}
