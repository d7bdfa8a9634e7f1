"""Row filters: :class:`Filter` (a user predicate) and :class:`Dropna` (rows with nulls).

Both drop rows (``preserves_rows = False``). When their output is combined with other
branches (``filtered + other``), the workflow joins on the row index, so the dropped rows
leave every branch.
"""

from __future__ import annotations

from typing import Any, Callable

from tabloader import backend
from tabloader.ops.base import Columns, Operator, flatten_columns


class Filter(Operator):
    """Keep the rows where ``f(frame)`` is True.

    ``f`` receives the selected columns as a DataFrame and returns a boolean mask (a Series
    on the same index, or an array) with one entry per row, or the kept rows as a DataFrame
    (as NVTabular's ``Filter`` allows: its index must be labels of the input's rows, and it
    must hold the selected columns; a TypeError or ValueError says what is wrong). It is saved with the workflow as
    ``module:qualname``: use a named module-level function, not a lambda, and pass it to
    ``Workflow.load(path, trusted=[f])`` when loading (load never imports a function by name).

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.rows import Filter
        >>> def positive(df):
        ...     return df["x"] > 0
        >>> Filter(positive).transform(["x"], pd.DataFrame({"x": [-1, 2, 3]}))["x"].tolist()
        [2, 3]
        >>> def top_two(df):
        ...     return df.nlargest(2, "x")
        >>> Filter(top_two).transform(["x"], pd.DataFrame({"x": [-1, 2, 3]}))["x"].tolist()
        [2, 3]
    """

    device_note = "Runs where its function runs: on the GPU the function gets a cuDF frame."

    preserves_rows = False

    def __init__(self, f: Callable[[Any], Any]) -> None:
        if not callable(f):
            raise TypeError(f"Filter needs a function, got {f!r}")
        self.f = f

    @property
    def label(self) -> str:
        return f"Filter({getattr(self.f, '__name__', self.f)})"

    def transform(self, columns: Columns, frame: Any) -> Any:
        selected = frame[flatten_columns(columns)]
        mask = self.f(selected)
        if getattr(mask, "ndim", None) == 2:
            return self._kept_rows(selected, mask)
        dtype = getattr(mask, "dtype", None)
        # bool[pyarrow]: what comparing an arrow-backed column (a date, a string) gives in pandas
        if getattr(mask, "ndim", None) != 1 or len(mask) != len(selected) or \
                str(dtype) not in ("bool", "boolean", "bool[pyarrow]"):
            raise TypeError(f"{self.label} must return a boolean mask with one entry per row ({len(selected)}); "
                            f"got {type(mask).__name__} of dtype {dtype} and shape {getattr(mask, 'shape', None)}")
        if str(dtype) != "bool":  # nullable: a null keeps nothing
            mask = mask.fillna(False).astype(bool)
        return selected[mask]


    def _kept_rows(self, selected: Any, kept: Any) -> Any:
        """The rows of ``selected`` that the frame ``kept`` (what ``f`` returned) holds, in input order."""
        missing = [c for c in selected.columns if c not in kept.columns]
        if missing:
            raise ValueError(f"{self.label} returned a DataFrame without the selected column(s) {missing}")
        inside = kept.index.isin(selected.index)
        if not bool(inside.all()) or kept.index.has_duplicates:
            raise ValueError(f"{self.label} returned a DataFrame whose index is not a subset of the input rows' "
                             "labels (each at most once): return rows of the frame it gets, e.g. df[mask]")
        return selected[selected.index.isin(kept.index)]


class Dropna(Operator):
    """Drop the rows that have a null (NaN/None/NA, a NaN of an arrow float column too) in any
    selected column.

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.rows import Dropna
        >>> Dropna().transform(["x", "y"], pd.DataFrame({"x": [1.0, None, 3.0], "y": [1, 2, None]}))["x"].tolist()
        [1.0]
    """

    preserves_rows = False

    def transform(self, columns: Columns, frame: Any) -> Any:
        selected = frame[flatten_columns(columns)]
        # A NaN is missing in an arrow float column too (arrow keeps it apart from the nulls dropna sees).
        arrow_floats = [c for c, dtype in selected.dtypes.items() if backend.is_arrow_float_dtype(dtype)]
        return selected.assign(**{c: backend.arrow_nans_as_nulls(selected[c]) for c in arrow_floats}).dropna()
