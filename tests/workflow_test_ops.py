"""Tiny module-level operators for the engine tests (tests/test_workflow.py).

They do not depend on the concrete operators of :mod:`tabloader.ops`, so the engine can be
tested on its own. The module is importable by name (``workflow_test_ops``: pytest puts
``tests/`` on ``sys.path``, and spawned Dask worker processes inherit it), so workflows built
from these ops can be shipped to worker processes; the operators are registered
(``@register_operator``), so workflows built from them can be saved and loaded.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from tabloader.ops.base import Operator, StatOperator, flatten_columns
from tabloader.registry import register_operator
from tabloader.schema import Tags


@register_operator
class AddOne(Operator):
    """``x + 1`` for every selected column."""

    def transform(self, columns, frame):
        return frame[flatten_columns(columns)] + 1


@register_operator
class AddConst(Operator):
    """``x + value``; its output columns are tagged ``continuous``."""

    output_tags = (Tags.CONTINUOUS,)

    def __init__(self, value: float = 1.0) -> None:
        self.value = value

    def transform(self, columns, frame):
        return frame[flatten_columns(columns)] + self.value


@register_operator
class Apply(Operator):
    """``fn(x)`` for every selected column; ``fn`` is a function (saved as ``module:qualname``)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def transform(self, columns, frame):
        cols = flatten_columns(columns)
        return pd.DataFrame({c: self.fn(frame[c]) for c in cols}, index=frame.index)


def double(x):
    """A named module-level function (saved as ``workflow_test_ops:double``)."""
    return x * 2


@register_operator
class Center(StatOperator):
    """``x - mean(x)`` in float64; the mean is fit as (sum, count) partials, state saved as parquet."""

    output_tags = ("centered",)
    remove_tags = (Tags.CATEGORICAL,)

    def fit_partial(self, columns, frame):
        cols = flatten_columns(columns)
        values = frame[cols].astype("float64")
        return pd.DataFrame({"sum": values.sum(), "count": values.count().astype("int64")})

    def merge(self, left, right):
        return left + right

    def finalize(self, columns, merged):
        self.means_ = (merged["sum"] / merged["count"]).rename("mean")

    def transform(self, columns, frame):
        self.check_is_fitted(columns)
        cols = flatten_columns(columns)
        return frame[cols].astype("float64") - self.means_[cols]

    def get_state(self):
        return {"means": self.means_} if self.is_fitted else {}

    def set_state(self, state):
        if "means" in state:
            self.means_ = state["means"]  # a Series indexed by column name


@register_operator
class CenterFrame(Center):
    """Like :class:`Center` but keeps the column names in the saved state (a two-column frame)."""

    def get_state(self):
        if not self.is_fitted:
            return {}
        return {"means": pd.DataFrame({"column": list(self.means_.index), "mean": self.means_.to_numpy()}),
                "n_columns": len(self.means_)}

    def set_state(self, state):
        if "means" in state:
            frame = state["means"]
            self.means_ = pd.Series(frame["mean"].to_numpy(), index=frame["column"].tolist(), name="mean")
            assert state["n_columns"] == len(self.means_)


@register_operator
class Scale(StatOperator):
    """``x / sqrt(mean(x**2))`` (RMS scaling), fit from (sum of squares, count) partials."""

    def fit_partial(self, columns, frame):
        cols = flatten_columns(columns)
        values = frame[cols].astype("float64")
        return {c: (float((values[c] ** 2).sum()), int(values[c].count())) for c in cols}

    def merge(self, left, right):
        return {c: (left[c][0] + right[c][0], left[c][1] + right[c][1]) for c in left}

    def finalize(self, columns, merged):
        self.rms_ = {c: float(np.sqrt(s / n)) for c, (s, n) in merged.items()}

    def transform(self, columns, frame):
        self.check_is_fitted(columns)
        cols = flatten_columns(columns)
        return pd.DataFrame({c: frame[c] / self.rms_[c] for c in cols}, index=frame.index)

    def get_state(self):
        return {"rms": self.rms_} if self.is_fitted else {}

    def set_state(self, state):
        if "rms" in state:
            self.rms_ = dict(state["rms"])


@register_operator
class CountRows(StatOperator):
    """Passes columns through; learns the number of rows seen (partials may come from empty partitions)."""

    def fit_partial(self, columns, frame):
        return len(frame)

    def merge(self, left, right):
        return left + right

    def finalize(self, columns, merged):
        self.rows_ = int(merged)

    def transform(self, columns, frame):
        self.check_is_fitted(columns)
        return frame[flatten_columns(columns)]

    def get_state(self):
        return {"rows": self.rows_}

    def set_state(self, state):
        self.rows_ = state["rows"]


@register_operator
class DropOdd(Operator):
    """Keeps the rows whose first selected column is even (a filter: it drops rows)."""

    preserves_rows = False

    def transform(self, columns, frame):
        cols = flatten_columns(columns)
        return frame.loc[frame[cols[0]] % 2 == 0, cols]
