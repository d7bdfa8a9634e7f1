"""Column-level operators: :class:`Rename`, :class:`AddTags`, :class:`AddProperties`,
:class:`ReduceDtypeSize`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from tabloader import backend
from tabloader.ops.base import Columns, NotFittedError, Operator, StatOperator, flatten_columns
from tabloader.schema import ColumnSchema, Schema


class Rename(Operator):
    """Rename columns by a function, a postfix, or (for one column) a new name.

    Exactly one of the arguments is given. Data, tags and properties are unchanged.

    Args:
        f: a module-level function old name -> new name (saved as ``module:qualname``: no
            lambdas; ``Workflow.load(path, trusted=[f])`` supplies it when loading).
        postfix: a string appended to every name.
        name: the new name of the single selected column.

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.columns import Rename
        >>> list(Rename(postfix="_n").transform(["a", "b"], pd.DataFrame({"a": [1], "b": [2]})).columns)
        ['a_n', 'b_n']
    """

    def __init__(self, f: Callable[[str], str] | None = None, postfix: str | None = None,
                 name: str | None = None) -> None:
        given = [x for x in (f, postfix, name) if x is not None]
        if len(given) != 1:
            raise ValueError("Rename takes exactly one of f, postfix or name")
        self.f, self.postfix, self.name = f, postfix, name

    def _new_name(self, col: str, columns: list[str]) -> str:
        if self.f is not None:
            return self.f(col)
        if self.postfix is not None:
            return col + self.postfix
        if len(columns) != 1:
            raise ValueError(f"Rename(name={self.name!r}) renames one column, but {len(columns)} are selected: {columns}")
        return self.name

    def output_column_names(self, columns: Columns) -> list[str]:
        cols = flatten_columns(columns)
        return [self._new_name(c, cols) for c in cols]

    def transform(self, columns: Columns, frame: Any) -> Any:
        cols = flatten_columns(columns)
        return frame[cols].rename(columns=dict(zip(cols, self.output_column_names(columns))))

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        cols = flatten_columns(columns)
        return Schema((input_schema[c] if c in input_schema else ColumnSchema(c)).with_name(new)
                      for c, new in zip(cols, self.output_column_names(columns)))


class AddTags(Operator):
    """Add tags to the selected columns' schema; the data passes through unchanged.

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> from tabloader.ops.columns import AddTags
        >>> wf = tl.Workflow(["y"] >> AddTags(["target", "binary"]), progress=False).fit(pd.DataFrame({"y": [0, 1]}))
        >>> sorted(wf.output_schema["y"].tags)
        ['binary', 'target']
    """

    def __init__(self, tags: Sequence[Any]) -> None:
        self.tags = [str(t) for t in ([tags] if isinstance(tags, str) else tags)]

    def transform(self, columns: Columns, frame: Any) -> Any:
        return frame[flatten_columns(columns)]

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        return Schema(c.with_tags(*self.tags) for c in super().compute_output_schema(input_schema, columns))


class AddProperties(Operator):
    """Add properties (JSON values) to the selected columns' schema; data passes through.

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> from tabloader.ops.columns import AddProperties
        >>> wf = tl.Workflow(["c"] >> AddProperties(cardinality=10), progress=False).fit(pd.DataFrame({"c": [1]}))
        >>> wf.output_schema["c"].properties
        {'cardinality': 10}
    """

    def __init__(self, **properties: Any) -> None:
        self.properties = dict(properties)

    def get_config(self) -> dict[str, Any]:
        return dict(self.properties)

    def transform(self, columns: Columns, frame: Any) -> Any:
        return frame[flatten_columns(columns)]

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        return Schema(c.with_properties(**self.properties)
                      for c in super().compute_output_schema(input_schema, columns))


_INT_DTYPES = [np.dtype(t) for t in ("int8", "int16", "int32", "int64")]
_STATE_DTYPES = {*(t.name for t in _INT_DTYPES), "uint64"}  # what fit can record (_smallest_int)
_NULLABLE_INTS = {name: "UInt64" if name == "uint64" else name.capitalize() for name in _STATE_DTYPES}


class ReduceDtypeSize(StatOperator):
    """Cast integer columns to the smallest signed integer dtype holding the values seen at fit,
    and float64 columns to ``float_dtype``.

    Nullable integers (``Int64``...) stay nullable (``Int8``...); unsigned columns become the
    smallest signed dtype that fits (or stay ``uint64`` above the int64 range); an integer
    column without values becomes int8. Other columns pass through. A value outside the fitted
    range at transform raises ``ValueError`` (casting would wrap it silently).

    Args:
        float_dtype: target of float64 columns (``None`` keeps float64).

    Fitted attributes: ``dtypes_`` (dict column -> dtype name) and ``ranges_`` (column ->
    ``[min, max]`` of integer columns).

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> from tabloader.ops.columns import ReduceDtypeSize
        >>> wf = tl.Workflow(["i", "f"] >> ReduceDtypeSize(), progress=False)
        >>> out = wf.fit_transform(pd.DataFrame({"i": [1, 300], "f": [0.5, 1.5]}))
        >>> str(out["i"].dtype), str(out["f"].dtype)
        ('int16', 'float32')
    """

    def __init__(self, float_dtype: str | None = "float32") -> None:
        self.float_dtype = None if float_dtype is None else str(np.dtype(float_dtype))

    @staticmethod
    def _is_int(series: Any) -> bool:
        dtype = series.dtype
        return getattr(dtype, "kind", "") in "iu" and str(dtype) != "bool"

    def fit_partial(self, columns: Columns, frame: Any) -> dict[str, Any]:
        stats: dict[str, Any] = {}
        for col in flatten_columns(columns):
            series = frame[col]
            if self._is_int(series):
                lo, hi = series.min(), series.max()
                stats[col] = ("int", None if _is_null(lo) else int(lo), None if _is_null(hi) else int(hi))
            else:
                stats[col] = ("other", None, None)
        return stats

    def merge(self, left: dict, right: dict) -> dict:
        return {c: (left[c][0], _opt(min, left[c][1], right[c][1]), _opt(max, left[c][2], right[c][2])) for c in left}

    def finalize(self, columns: Columns, merged: dict) -> None:
        self.ranges_ = {c: [lo, hi] for c, (kind, lo, hi) in merged.items() if kind == "int"}
        self.dtypes_ = {}
        for col, (lo, hi) in self.ranges_.items():
            self.dtypes_[col] = _smallest_int(lo, hi)

    def _target(self, series: Any, col: str) -> str | None:
        dtype = series.dtype
        if self._is_int(series):
            target = self.dtypes_[col]
            nullable = not isinstance(dtype, np.dtype) and not backend.is_gpu_object(series)
            return _NULLABLE_INTS[target] if nullable else target
        if self.float_dtype is not None and str(dtype).lower() in ("float64", "double[pyarrow]"):
            return self.float_dtype if isinstance(dtype, np.dtype) else self.float_dtype.capitalize()
        return None

    def transform(self, columns: Columns, frame: Any) -> Any:
        self.check_is_fitted(columns)
        cols = flatten_columns(columns)
        out = {}
        for col in cols:
            series = frame[col]
            if self._is_int(series) and col not in self.dtypes_:
                raise NotFittedError(f"{self.label} was not fitted on integer column {col!r}; refit the workflow")
            target = self._target(series, col)
            if target is None or str(series.dtype) == target:
                out[col] = series
                continue
            if self._is_int(series) and len(series):
                lo, hi = series.min(), series.max()
                info = np.iinfo(np.dtype(target.lower()))
                if (not _is_null(lo) and int(lo) < info.min) or (not _is_null(hi) and int(hi) > info.max):
                    raise ValueError(f"{self.label}: column {col!r} has values in [{lo}, {hi}], outside the range "
                                     f"{self.ranges_[col]} seen at fit, which does not fit its reduced dtype {target}")
            out[col] = series.astype(target)
        return backend.frame_from_columns(out, frame.index, like=frame)

    def get_state(self) -> dict[str, Any]:
        return {"dtypes": self.dtypes_, "ranges": self.ranges_} if self.is_fitted else {}

    def set_state(self, state: dict[str, Any]) -> None:
        if "dtypes" in state:
            unknown = {c: d for c, d in dict(state["dtypes"]).items() if str(d) not in _STATE_DTYPES}
            if unknown:  # a saved file names them: only the integer dtypes fit gives
                raise ValueError(f"{self.label}: saved dtypes {unknown!r:.200} are not among {sorted(_STATE_DTYPES)}")
            self.dtypes_ = dict(state["dtypes"])
            self.ranges_ = {k: list(v) for k, v in state["ranges"].items()}


def _is_null(value: Any) -> bool:
    """True for None, NaN and pd.NA (what ``min()`` of an empty or all-null column gives)."""
    import pandas as pd

    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _opt(fn: Callable, a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else fn(a, b)


def _smallest_int(lo: int | None, hi: int | None) -> str:
    if lo is None:
        return "int8"
    for dtype in _INT_DTYPES:
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return str(dtype)
    return "uint64"
