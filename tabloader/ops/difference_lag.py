"""DifferenceLag: the change of a column since the previous row of the same key (e.g. session).

Rows are assumed sorted by key (and by time within a key) within each partition: the op
compares each row with the row ``shift`` places before it in the partition, and when both
share the partition key, outputs the difference; otherwise (different key, or no such row,
as for the first rows of every partition) it outputs NaN. Keep all rows of one key in one
partition (write the data sorted by key, with partitions cut at key boundaries) to get a
difference for every row but the first of each key.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tabloader import backend
from tabloader.ops.base import Columns, Operator, check_numeric, flatten_columns
from tabloader.schema import Schema, Tags


class DifferenceLag(Operator):
    """``x[i] - x[i - shift]`` within groups of equal ``partition_cols`` (NaN across groups).

    Outputs ``{col}_difference_lag_{shift}`` for every selected column and shift, as float
    (float32 inputs give float32, others float64), tagged ``continuous``. A negative shift
    compares with a later row. Null keys never match.

    Args:
        partition_cols: the key column(s); read from the input data when not selected.
        shift: an int or a list of ints (non-zero).

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.difference_lag import DifferenceLag
        >>> df = pd.DataFrame({"user": [1, 1, 1, 2, 2], "ts": [10, 15, 21, 5, 9]})
        >>> DifferenceLag("user").transform(["ts"], df)["ts_difference_lag_1"].tolist()
        [nan, 5.0, 6.0, nan, 4.0]
    """

    output_tags = (Tags.CONTINUOUS,)
    remove_tags = (Tags.CATEGORICAL,)

    def __init__(self, partition_cols: str | Sequence[str], shift: int | Sequence[int] = 1) -> None:
        self.partition_cols = partition_cols
        self.shift = shift
        if any(int(s) != s or s == 0 for s in self._shifts()):
            raise ValueError(f"DifferenceLag shifts must be non-zero integers, got {shift!r}")

    def _shifts(self) -> list[int]:
        return [self.shift] if isinstance(self.shift, (int, np.integer)) else list(self.shift)

    def _keys(self) -> list[str]:
        return [self.partition_cols] if isinstance(self.partition_cols, str) else list(self.partition_cols)

    def dependencies(self) -> list[str]:
        return self._keys()

    def output_column_names(self, columns: Columns) -> list[str]:
        return [f"{col}_difference_lag_{s}" for s in self._shifts() for col in flatten_columns(columns)]

    def transform(self, columns: Columns, frame: Any) -> Any:
        cols = flatten_columns(columns)
        check_numeric(self, frame, cols)
        keys = frame[self._keys()]
        out = {}
        for s in self._shifts():
            same = None
            for k in keys.columns:
                eq = (keys[k] == keys[k].shift(s)).fillna(False)
                same = eq if same is None else same & eq
            same_values = backend.column_values(same.astype(bool))
            for col in cols:
                diff = _lagged_difference(frame[col], s)
                # where, not diff[~same_values] = nan: on CuPy that reads the mask's count back
                xp = backend.array_lib(diff)
                out[f"{col}_difference_lag_{s}"] = xp.where(same_values, diff, diff.dtype.type(np.nan))
        return backend.frame_from_columns(out, frame.index, like=frame)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        from tabloader.schema import ColumnSchema

        out = []
        for name in self.output_column_names(columns):
            col = ColumnSchema(name, tags={Tags.CONTINUOUS})
            out.append(col)
        return Schema(out)


def _lagged_difference(series: Any, shift: int) -> Any:
    """``series[i] - series[i - shift]`` as floats (NaN where either is null or out of range).
    Integers are subtracted as int64 first: as float64, nanosecond timestamps (~1.7e18) lose
    their last 8 bits, so a difference of 1 ns came out 0."""
    exact = series.dtype.kind in "iu" and not (series.dtype.kind == "u" and series.dtype.itemsize == 8)
    if exact:
        x = backend.column_values(series.fillna(0).astype("int64"))
        missing = backend.column_values(series.isna())  # not hasnans: on cuDF a read back
        dtype = np.float64
    else:
        x = backend.column_values(series, "float32" if series.dtype == np.float32 else "float64")
        missing, dtype = None, x.dtype
    xp = backend.array_lib(x)
    diff = xp.full(x.shape, xp.nan, dtype=dtype)
    n, k = len(x), abs(shift)
    if k < n:
        later, earlier = (slice(k, None), slice(None, n - k)) if shift > 0 else (slice(None, n - k), slice(k, None))
        diff[later] = (x[later] - x[earlier]).astype(dtype)
        if missing is not None:
            diff[later] = xp.where(missing[later] | missing[earlier], np.nan, diff[later])
    return diff
