"""Scaling of continuous columns: :class:`Normalize` (z-score) and :class:`NormalizeMinMax`.

Statistics ignore NaN and +-inf (and nulls of nullable dtypes). They are computed per
partition and merged: moments with Chan et al.'s parallel formula, extremes with min/max.
Degenerate columns never produce NaN/inf from finite inputs: where the spread is 0 (a single
value) or unknown (no finite value at fit, a warning names the column), every non-NaN value
maps to 0. NaN stays NaN; +-inf maps to +-inf where the spread is positive.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from tabloader import backend
from tabloader.ops.base import Columns, StatOperator, check_numeric, flatten_columns
from tabloader.ops.elementwise import elementwise, holds_list_columns, list_elements
from tabloader.schema import Tags


def float_values(series: Any) -> Any:
    """The values of a numeric column (of its elements, for a list column) as a float64
    numpy/CuPy array, nulls as NaN."""
    return backend.column_values(list_elements("float_values", series.name, series), "float64")


def _check_out_dtype(op: Any) -> np.dtype:
    dtype = np.dtype(op.out_dtype)
    if dtype.kind != "f":
        raise ValueError(f"{op.label}: out_dtype must be a float dtype, got {op.out_dtype!r}")
    return dtype


def _scale(x: Any, offset: float, scale: float, out_dtype: np.dtype) -> Any:
    """``(x - offset) / scale`` as ``out_dtype``; 0 for every non-NaN ``x`` when scale is 0 or unknown.

    Works in float32 for float32 inputs with a float32 output, else in float64, with one
    temporary array.
    """
    xp = backend.array_lib(x)
    if not (scale > 0 and math.isfinite(scale) and math.isfinite(offset)):
        return xp.where(xp.isnan(x), xp.nan, 0.0).astype(out_dtype)
    work = np.result_type(x.dtype, out_dtype, np.float32)
    tmp = xp.subtract(x, work.type(offset), dtype=work)
    if out_dtype == work:
        xp.divide(tmp, work.type(scale), out=tmp)
        return tmp
    out = xp.empty(tmp.shape, dtype=out_dtype)
    xp.divide(tmp, work.type(scale), out=out, casting="same_kind")
    return out


class Normalize(StatOperator):
    """Standardize continuous columns: ``(x - mean) / std``, output float32 by default.

    ``std`` is the population standard deviation (``ddof=0``, as ``numpy.std``) of the finite
    values; partial statistics ``(count, mean, M2)`` per partition are merged with Chan et
    al.'s parallel formula, so any partitioning gives the same result to rounding. Outputs are
    tagged ``continuous`` (``categorical`` is removed).

    Semantics: NaN/null stays NaN; +-inf is left out of the statistics and maps to +-inf; a
    column with ``std == 0`` (one distinct value) or without finite values maps every
    non-NaN value to 0.

    Args:
        out_dtype: float dtype of the outputs (default ``"float32"``).

    Fitted attributes: ``means_``, ``stds_``, ``counts_`` (dicts column -> value).

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> from tabloader.ops.normalize import Normalize
        >>> wf = tl.Workflow(["x"] >> Normalize(), progress=False)
        >>> out = wf.fit_transform(pd.DataFrame({"x": [1.0, 2.0, 3.0, None]}))
        >>> out["x"].astype("float64").round(4).tolist()[:3], str(out["x"].dtype)
        ([-1.2247, 0.0, 1.2247], 'float32')
    """

    output_tags = (Tags.CONTINUOUS,)
    remove_tags = (Tags.CATEGORICAL,)

    def __init__(self, out_dtype: str = "float32") -> None:
        self.out_dtype = out_dtype
        self.out_dtype = str(_check_out_dtype(self))  # np.float64 given: saved by its name

    def fit_partial(self, columns: Columns, frame: Any) -> dict[str, tuple[int, float, float]]:
        cols = flatten_columns(columns)
        check_numeric(self, frame, cols, allow_lists=True)
        # Every column's moments first, then one copy of them all to the host (on a GPU, the
        # only wait for the device in this partition's fit).
        moments = backend.host_floats([m for col in cols for m in backend.finite_moments(float_values(frame[col]))])
        return {col: (int(moments[3 * i]), moments[3 * i + 1], moments[3 * i + 2]) for i, col in enumerate(cols)}

    def merge(self, left: dict, right: dict) -> dict:
        return {c: _chan(left[c], right[c]) for c in left}

    def finalize(self, columns: Columns, merged: dict) -> None:
        empty = [c for c, (n, _, _) in merged.items() if n == 0]
        if empty:
            warnings.warn(f"Normalize: column(s) {empty} have no finite value at fit; their mean/std are NaN and "
                          "their non-NaN values will map to 0", RuntimeWarning, stacklevel=2)
        self.counts_ = {c: int(n) for c, (n, _, _) in merged.items()}
        self.means_ = {c: (float(m) if n else float("nan")) for c, (n, m, _) in merged.items()}
        self.stds_ = {c: (math.sqrt(max(m2, 0.0) / n) if n else float("nan")) for c, (n, _, m2) in merged.items()}

    def transform(self, columns: Columns, frame: Any) -> Any:
        self.check_is_fitted(columns)
        cols = flatten_columns(columns)
        self.check_fitted_on(cols, self.means_)
        check_numeric(self, frame, cols, allow_lists=True)
        if holds_list_columns(frame, cols):  # element-wise, lists kept
            return elementwise(self, frame, cols, self.transform_values)
        out = {c: self.transform_values(c, backend.numeric_values(frame[c])) for c in cols}
        return backend.frame_from_columns(out, frame.index, like=frame)

    def transform_values(self, column: str, values: Any) -> Any:
        """Column ``column``'s output from its values (a numpy/CuPy array, nulls as NaN), as
        :meth:`transform` computes it; :mod:`tabloader.serving` calls it on request arrays."""
        return _scale(values, self.means_[column], self.stds_[column], _check_out_dtype(self))

    def get_state(self) -> dict[str, Any]:
        return {"means": self.means_, "stds": self.stds_, "counts": self.counts_} if self.is_fitted else {}

    def set_state(self, state: dict[str, Any]) -> None:
        if "means" in state:
            self.means_ = {k: float(v) for k, v in state["means"].items()}
            self.stds_ = {k: float(v) for k, v in state["stds"].items()}
            self.counts_ = {k: int(v) for k, v in state["counts"].items()}


def _chan(a: tuple[int, float, float], b: tuple[int, float, float]) -> tuple[int, float, float]:
    """Merge (count, mean, M2) moments (Chan, Golub & LeVeque 1979)."""
    na, ma, m2a = a
    nb, mb, m2b = b
    if na == 0:
        return b
    if nb == 0:
        return a
    n = na + nb
    delta = mb - ma
    return n, ma + delta * (nb / n), m2a + m2b + delta * delta * (na * nb / n)


class NormalizeMinMax(StatOperator):
    """Scale continuous columns to ``[0, 1]``: ``(x - min) / (max - min)``, output float32 by default.

    ``min``/``max`` are those of the finite values seen at fit; later values outside them map
    outside ``[0, 1]`` (no clipping). ``max == min`` (or no finite value at fit) maps every
    non-NaN value to 0; NaN stays NaN. Outputs are tagged ``continuous``.

    Args:
        out_dtype: float dtype of the outputs (default ``"float32"``).

    Fitted attributes: ``mins_``, ``maxs_`` (dicts column -> float).

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> from tabloader.ops.normalize import NormalizeMinMax
        >>> wf = tl.Workflow(["x"] >> NormalizeMinMax(), progress=False)
        >>> wf.fit_transform(pd.DataFrame({"x": [2.0, 4.0, 6.0]}))["x"].tolist()
        [0.0, 0.5, 1.0]
    """

    output_tags = (Tags.CONTINUOUS,)
    remove_tags = (Tags.CATEGORICAL,)

    def __init__(self, out_dtype: str = "float32") -> None:
        self.out_dtype = out_dtype
        self.out_dtype = str(_check_out_dtype(self))  # np.float64 given: saved by its name

    def fit_partial(self, columns: Columns, frame: Any) -> dict[str, tuple[float, float]]:
        cols = flatten_columns(columns)
        check_numeric(self, frame, cols, allow_lists=True)
        extremes = backend.host_floats([e for col in cols for e in backend.finite_extremes(float_values(frame[col]))])
        return {col: (extremes[2 * i], extremes[2 * i + 1]) for i, col in enumerate(cols)}

    def merge(self, left: dict, right: dict) -> dict:
        return {c: (min(left[c][0], right[c][0]), max(left[c][1], right[c][1])) for c in left}

    def finalize(self, columns: Columns, merged: dict) -> None:
        empty = [c for c, (lo, hi) in merged.items() if lo > hi]
        if empty:
            warnings.warn(f"NormalizeMinMax: column(s) {empty} have no finite value at fit; their min/max are NaN "
                          "and their non-NaN values will map to 0", RuntimeWarning, stacklevel=2)
        self.mins_ = {c: (lo if lo <= hi else float("nan")) for c, (lo, hi) in merged.items()}
        self.maxs_ = {c: (hi if lo <= hi else float("nan")) for c, (lo, hi) in merged.items()}

    def transform(self, columns: Columns, frame: Any) -> Any:
        self.check_is_fitted(columns)
        cols = flatten_columns(columns)
        self.check_fitted_on(cols, self.mins_)
        check_numeric(self, frame, cols, allow_lists=True)
        if holds_list_columns(frame, cols):  # element-wise, lists kept
            return elementwise(self, frame, cols, self.transform_values)
        out = {c: self.transform_values(c, backend.numeric_values(frame[c])) for c in cols}
        return backend.frame_from_columns(out, frame.index, like=frame)

    def transform_values(self, column: str, values: Any) -> Any:
        """Column ``column``'s output from its values (a numpy/CuPy array, nulls as NaN), as
        :meth:`transform` computes it; :mod:`tabloader.serving` calls it on request arrays."""
        low = self.mins_[column]
        return _scale(values, low, self.maxs_[column] - low, _check_out_dtype(self))

    def get_state(self) -> dict[str, Any]:
        return {"mins": self.mins_, "maxs": self.maxs_} if self.is_fitted else {}

    def set_state(self, state: dict[str, Any]) -> None:
        if "mins" in state:
            self.mins_ = {k: float(v) for k, v in state["mins"].items()}
            self.maxs_ = {k: float(v) for k, v in state["maxs"].items()}
