"""Row filters: :class:`Filter` (a user predicate) and :class:`Dropna` (rows with nulls).

Both drop rows (``preserves_rows = False``). When their output is combined with other
branches (``filtered + other``), the workflow joins on the row index, so the dropped rows
leave every branch.
"""

from __future__ import annotations

from typing import Any, Callable

from tabloader.ops.base import Columns, Operator, flatten_columns


class Filter(Operator):
    """Keep the rows where ``f(frame)`` is True.

    ``f`` receives the selected columns as a DataFrame and returns a boolean mask (a Series
    on the same index, or an array) with one entry per row. It is saved with the workflow as
    ``module:qualname``: use a named module-level function, not a lambda, and pass it to
    ``Workflow.load(path, trusted=[f])`` when loading (load never imports a function by name).

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.rows import Filter
        >>> def positive(df):
        ...     return df["x"] > 0
        >>> Filter(positive).transform(["x"], pd.DataFrame({"x": [-1, 2, 3]}))["x"].tolist()
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
        dtype = getattr(mask, "dtype", None)
        if getattr(mask, "ndim", None) != 1 or len(mask) != len(selected) or str(dtype) not in ("bool", "boolean"):
            raise TypeError(f"{self.label} must return a boolean mask with one entry per row ({len(selected)}); "
                            f"got {type(mask).__name__} of dtype {dtype} and shape {getattr(mask, 'shape', None)}")
        if str(dtype) == "boolean":  # nullable: a null keeps nothing
            mask = mask.fillna(False).astype(bool)
        return selected[mask]


class Dropna(Operator):
    """Drop the rows that have a null (NaN/None/NA) in any selected column.

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.rows import Dropna
        >>> Dropna().transform(["x", "y"], pd.DataFrame({"x": [1.0, None, 3.0], "y": [1, 2, None]}))["x"].tolist()
        [1.0]
    """

    preserves_rows = False

    def transform(self, columns: Columns, frame: Any) -> Any:
        return frame[flatten_columns(columns)].dropna()
