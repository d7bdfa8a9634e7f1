"""DataStats: per-column statistics of the data flowing through a graph (NVTabular's ``DataStats``)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from pandas.api.types import is_bool_dtype, is_float_dtype, is_numeric_dtype

from tabloader import backend
from tabloader.ops.base import Columns, StatOperator, flatten_columns
from tabloader.ops.elementwise import list_elements
from tabloader.ops.normalize import _chan, float_values
from tabloader.schema import ColumnSchema, Schema


class DataStats(StatOperator):
    """Collect per-column statistics at fit; the data passes through unchanged.

    For each selected column (a list column: over its elements), ``stats_[column]`` holds
    ``dtype``, ``rows``, ``nulls`` and ``null_fraction`` (nulls and NaN over rows or elements);
    numeric columns add ``min``, ``max``, ``mean`` and ``std`` (sample, ddof=1, as pandas) of
    the finite values; integer, boolean and string columns add ``cardinality``, the exact
    number of distinct non-null values (counted with the categorical encoding module, merged
    across partitions). Statistics that do not apply, or have no value, are None.
    :meth:`to_frame` gives them as a DataFrame, one row per column.

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> op = DataStats()
        >>> frame = pd.DataFrame({"c": ["a", "b", "a", None], "x": [1.0, 2.0, None, 3.0]})
        >>> _ = tl.Workflow(["c", "x"] >> op, progress=False).fit(frame)
        >>> op.stats_["c"]["cardinality"], op.stats_["x"]["mean"], op.stats_["x"]["null_fraction"]
        (2, 2.0, 0.25)
    """

    device_note = ("Counts distinct values with the categorical encoding module and moments with numpy/CuPy; "
                   "only the small statistics leave the device.")

    def fit_partial(self, columns: Columns, frame: Any) -> dict[str, dict[str, Any]]:
        enc = backend.encoding_for(frame)
        stats, numbers, jobs = {}, {}, {}
        cols = flatten_columns(columns)
        schema = Schema.from_frame(frame[cols])  # once: on a GPU, through an (empty) arrow copy
        for col in cols:
            values = list_elements(self, col, frame[col])
            stats[col] = {"dtype": _dtype_name(schema[col]), "rows": int(len(values)), "moments": None,
                          "extremes": None, "counts": None}
            numbers[col] = _numbers(values)
            if not is_float_dtype(values.dtype):  # integers, booleans, strings: distinct values are counted
                normalized = enc.normalize_column(self, col, values)
                jobs[col] = ([normalized], normalized.mask)
        # Every column's numbers, then every column's counts, read back at once (on a GPU, two
        # waits for the device in this partition rather than several per column).
        read = iter(backend.host_floats([v for col_numbers in numbers.values() for v in col_numbers]))
        for col, col_numbers in numbers.items():
            stats[col]["nulls"] = int(next(read))
            if len(col_numbers) > 1:
                n, mean, m2, low, high = (next(read) for _ in range(5))
                stats[col]["moments"] = (int(n), mean, m2)
                stats[col]["extremes"] = (low, high) if n else None
        for col, partial in zip(jobs, enc.count_values_each(list(jobs.values()))):
            stats[col]["counts"] = partial
        return stats

    def merge(self, left: dict, right: dict) -> dict:
        merged = {c: self._merge_one(left[c], right[c]) for c in left}
        both = [c for c in left if left[c]["counts"] is not None and right[c]["counts"] is not None]
        if both:  # where the partials are, every column's merge at once
            enc = backend.encoding_for(left[both[0]]["counts"]["counts"])
            for col, counts in zip(both, enc.merge_counts_each([(left[c]["counts"], right[c]["counts"], c)
                                                                for c in both], self)):
                merged[col]["counts"] = counts
        return merged

    def _merge_one(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        """The merged statistics of one column, but counts of both partials (merged by :meth:`merge`)."""
        out = {"dtype": a["dtype"], "rows": a["rows"] + b["rows"], "nulls": a["nulls"] + b["nulls"]}
        out["moments"] = _chan(a["moments"], b["moments"]) if a["moments"] and b["moments"] else \
            a["moments"] or b["moments"]
        ext = [e for e in (a["extremes"], b["extremes"]) if e is not None]
        out["extremes"] = (min(e[0] for e in ext), max(e[1] for e in ext)) if ext else None
        out["counts"] = a["counts"] if b["counts"] is None else b["counts"]
        return out

    def finalize(self, columns: Columns, merged: dict) -> None:
        self.stats_ = {col: _summary(part) for col, part in merged.items()}

    def transform(self, columns: Columns, frame: Any) -> Any:
        return frame[flatten_columns(columns)]

    def to_frame(self) -> pd.DataFrame:
        """The statistics as a DataFrame, one row per column (index: the column names)."""
        self.check_is_fitted()
        return pd.DataFrame.from_dict(self.stats_, orient="index")

    def get_state(self) -> dict[str, Any]:
        return {"stats": self.stats_} if self.is_fitted else {}

    def set_state(self, state: dict[str, Any]) -> None:
        if "stats" in state:
            self.stats_ = {c: dict(s) for c, s in state["stats"].items()}


def _numbers(values: Any) -> list:
    """A column's nulls (and NaN), then for numbers the moments and extremes of its finite
    values, as numpy scalars or 0-d CuPy arrays (nothing read back from the device)."""
    if not is_numeric_dtype(values.dtype) or is_bool_dtype(values.dtype):
        return [backend.column_values(values.isna()).sum()]
    x = float_values(values)  # nulls and NaN as NaN (cuDF's isna of a float column counts its NaN first)
    return [backend.array_lib(x).isnan(x).sum(), *backend.finite_moments(x), *backend.finite_extremes(x)]


def _summary(part: dict[str, Any]) -> dict[str, Any]:
    """The finalized statistics of one column (JSON values; None where a statistic has no value)."""
    rows, nulls = part["rows"], part["nulls"]
    n, mean, m2 = part["moments"] or (0, None, 0.0)
    low, high = part["extremes"] or (None, None)
    return {"dtype": part["dtype"], "rows": rows, "nulls": nulls, "null_fraction": nulls / rows if rows else None,
            "cardinality": None if part["counts"] is None else int(len(part["counts"]["counts"])),
            "min": low, "max": high, "mean": mean if n else None,
            "std": math.sqrt(m2 / (n - 1)) if n > 1 else None}


def _dtype_name(column: ColumnSchema) -> str:
    """The column's dtype as the schema names it (``int64``, ``string``, ``list<int64>``): the
    same name for a pandas and a cuDF column of the same data (``str(dtype)`` differs: ``str`` or
    ``list<item: int64>[pyarrow]`` against cuDF's ``object`` or ``list``)."""
    return f"list<{column.dtype}>" if column.is_list else column.dtype
