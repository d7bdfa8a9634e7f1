""":class:`AsType`: cast columns to a number or text type, checked so that no value changes.

Why an operator for what ``LambdaOp`` could do: a workflow is saved as data, and a LambdaOp's
function must be a module-level function that the loading side trusts. A cast is the most
common such function -- Spark's and Oracle's ``DECIMAL`` amounts and ids, which the loader
refuses and Categorify does not encode -- and AsType saves as its dtype name alone.
"""

from __future__ import annotations

import decimal
from typing import Any

import numpy as np

from tabloader import backend
from tabloader.ops.base import Columns, Operator, flatten_columns
from tabloader.schema import Tags

_FLOATS = ("float32", "float64")
_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_TEXT = ("string",)
TARGETS = _FLOATS + _INTEGERS + _TEXT


class AsType(Operator):
    """Cast the selected columns to ``dtype``; a value the cast would change is an error.

    - ``"float32"``/``"float64"``: from numbers, decimals and booleans; nulls become NaN.
      Outputs are tagged ``continuous``.
    - ``"int8"`` ... ``"int64"``, ``"uint8"`` ... ``"uint64"``: from integers, booleans, and
      floats and decimals holding whole numbers. A fraction, an infinity or a value outside
      the type's range raises ``ValueError`` naming the column and the value (a plain
      cast would truncate or wrap it). Nulls (and NaN) stay null: on pandas the result is the nullable
      dtype (``Int64``...) unless the input was a numpy integer or boolean column.
    - ``"string"``: from integers, decimals (``1.50`` keeps its scale, as Spark writes it) and
      strings; text in pandas 3's ``str`` dtype (cuDF's strings on the GPU), nulls stay null.
      Floats are refused: their text depends on formatting; cast them to an integer first.

    Example (a Spark ``DECIMAL(38,0)`` id to text for Categorify, an amount to float)::

        >>> import decimal, pandas as pd, pyarrow as pa, tabloader as tl
        >>> from tabloader.ops.astype import AsType
        >>> dec = lambda values, scale: pd.array([decimal.Decimal(v) for v in values],
        ...                                      dtype=pd.ArrowDtype(pa.decimal128(38, scale)))
        >>> df = pd.DataFrame({"id": dec(["12345678901234567890123", "7"], 0), "amount": dec(["1.50", "2.25"], 2)})
        >>> wf = tl.Workflow((["id"] >> AsType("string")) + (["amount"] >> AsType("float32")), progress=False)
        >>> out = wf.fit_transform(df)
        >>> out["id"].tolist(), out["amount"].tolist(), str(out["amount"].dtype)
        (['12345678901234567890123', '7'], [1.5, 2.25], 'float32')
    """

    def __init__(self, dtype: str) -> None:
        dtype = "string" if dtype in ("str", str) else str(dtype)
        if dtype not in TARGETS:
            raise ValueError(f"AsType(dtype={dtype!r}): expected one of {list(TARGETS)}")
        self.dtype = dtype
        if dtype in _FLOATS:  # a number now, no longer a category
            self.output_tags, self.remove_tags = (Tags.CONTINUOUS,), (Tags.CATEGORICAL,)

    def transform(self, columns: Columns, frame: Any) -> Any:
        out = {col: self._cast(col, frame[col]) for col in flatten_columns(columns)}
        return backend.frame_from_columns(out, frame.index, like=frame)

    def _cast(self, col: str, series: Any) -> Any:
        kind = _kind(series)
        if self.dtype in _FLOATS and kind in "biufd":
            return backend.column_values(series, self.dtype)
        if self.dtype in _INTEGERS and kind in "biufd":
            return self._integers(col, series, kind)
        if self.dtype in _TEXT and kind in "iuTd":
            return backend.as_strings(series)
        raise TypeError(f"{self.label} cannot cast column {col!r} of dtype {series.dtype} to {self.dtype}: "
                        f"{_ACCEPTED[self.dtype]}")

    def _integers(self, col: str, series: Any, kind: str) -> Any:
        if kind == "f":
            series = backend.nans_as_nulls(series)  # cuDF keeps NaN apart from its nulls; pandas casts NaN to NA
        fractional = (series.round(0) != series) & series.notna() if kind in "fd" else None
        outside = self._outside_the_range(series, kind)
        checks = [c for c in (fractional, outside) if c is not None]
        # One question for both checks: on cuDF each any() waits for the device (a wait per column and partition);
        # which check failed is only asked when one did.
        if checks and bool((checks[0] if len(checks) == 1 else checks[0] | checks[1]).any()):
            if fractional is not None and bool(fractional.any()):
                raise ValueError(self._changed(col, series[fractional], "has a fraction",
                                               "round it first, or cast to a float"))
            raise ValueError(self._changed(col, series[outside], f"is outside {self.dtype}'s range",
                                           "cast ids to 'string', amounts to a float, or use a wider type"))
        return series.astype(backend.integer_dtype(series, self.dtype))

    def _outside_the_range(self, series: Any, kind: str) -> Any:
        """The rows whose values the target type cannot hold (None: none can be, by the dtype)."""
        info = np.iinfo(np.dtype(self.dtype))
        low, high = int(info.min), int(info.max)
        if kind == "b" or not len(series):
            return None
        if kind == "d":
            # Only the bounds the column's digits can pass, compared as decimals: exact, and small enough for
            # cuDF's 64-bit decimals (a decimal(18, 0) never passes int64's bounds: no comparison at all).
            precision, scale = backend.decimal_precision_scale(series.dtype)
            largest = 10 ** (precision - scale)  # every |value| is below it
            low = decimal.Decimal(low) if -largest < low else None
            high = decimal.Decimal(high) if largest > high else None
        if kind == "f":
            # Compared as floats, exactly: the bounds are -2**k or 0 and 2**k - 1, and 2**k - 1 rounds
            # up to 2**k, so the values above the range are those >= 2**k (2**63 itself included).
            # cuDF refuses an integer operand beyond 2**53 for a float column.
            checks = [series < float(low), series >= float(high + 1)]
        else:
            checks = ([] if low is None else [series < low]) + ([] if high is None else [series > high])
        if not checks:
            return None
        outside = checks[0] if len(checks) == 1 else checks[0] | checks[1]
        return outside & series.notna()

    def _changed(self, col: str, bad: Any, why: str, what_to_do: str) -> str:
        value = backend.to_host(bad.head(1)).iloc[0]
        return (f"{self.label}: column {col!r} holds {value} ({len(bad)} such value(s)), which {why}: casting it to "
                f"{self.dtype} would change it; {what_to_do}")


_ACCEPTED = {
    **{t: "it takes numbers, decimals and booleans" for t in _FLOATS},
    **{t: "it takes integers, booleans, and floats and decimals holding whole numbers" for t in _INTEGERS},
    "string": "it takes integers, decimals and strings (a float's text depends on formatting: cast it to an "
              "integer first)",
}


def _kind(series: Any) -> str:
    """One letter: numpy's kind for numbers and booleans (nullable ones too), ``d`` for
    decimals, ``T`` for text, ``?`` for anything else."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype, is_string_dtype

    dtype = series.dtype
    if backend.is_decimal_dtype(dtype):
        return "d"
    if is_bool_dtype(dtype):
        return "b"
    if is_numeric_dtype(dtype):
        return np.dtype(getattr(dtype, "numpy_dtype", dtype)).kind
    if is_string_dtype(dtype) and not backend.is_list_dtype(dtype):
        return "T"
    return "?"
