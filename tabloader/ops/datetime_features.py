""":class:`DatetimeFeatures`: calendar parts and epoch seconds of date and timestamp columns.

Event times are in nearly every recommender's data, and the hour and the day of the week are
among the first features anyone adds. Without this operator that takes a ``LambdaOp`` whose
function must be defined at module level and trusted when the workflow is loaded; this one is
saved as its list of feature names.
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from tabloader import backend
from tabloader.ops.base import Columns, Operator, flatten_columns
from tabloader.schema import ColumnSchema, Schema, Tags

#: Calendar parts -> the ``.dt`` attribute pandas and cuDF share (Monday is day 0 of the week).
CALENDAR = {"year": "year", "month": "month", "day_of_month": "day", "day_of_week": "weekday",
            "day_of_year": "dayofyear", "hour": "hour", "minute": "minute", "second": "second"}
FEATURES = (*CALENDAR, "weekend", "epoch_seconds")


class DatetimeFeatures(Operator):
    """Add ``{col}_{feature}`` for every selected date or timestamp column and every feature.

    Features: ``year``, ``month`` (1-12), ``day_of_month`` (1-31), ``day_of_week`` (Monday 0 to
    Sunday 6), ``day_of_year`` (1-366), ``hour``, ``minute``, ``second``, ``weekend`` (1 on
    Saturday and Sunday, else 0) as nullable 16-bit integers (``Int16``: a null time gives a null,
    in every partition the same dtype); and ``epoch_seconds`` (seconds since 1970-01-01 UTC,
    float64, NaN for a null; microseconds kept), tagged ``continuous``. A time-zoned timestamp
    gives its parts in its own zone. The calendar parts are small integers with no id contract:
    put ``Categorify`` after them for embeddings (it also gives nulls their id).

    Args:
        features: the feature names, in the order of the output columns (default: day of week
            and hour).

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> from tabloader.ops.datetime_features import DatetimeFeatures
        >>> df = pd.DataFrame({"ts": pd.to_datetime(["2024-06-01 18:30", None])})
        >>> out = tl.Workflow(["ts"] >> DatetimeFeatures(["day_of_week", "hour", "weekend"]),
        ...                   progress=False).fit_transform(df)
        >>> list(out.columns), out.iloc[0].tolist(), bool(out.iloc[1].isna().all())
        (['ts_day_of_week', 'ts_hour', 'ts_weekend'], [5, 18, 1], True)
    """

    def __init__(self, features: Sequence[str] = ("day_of_week", "hour")) -> None:
        features = [features] if isinstance(features, str) else list(features)
        unknown = [f for f in features if f not in FEATURES]
        if unknown or not features:
            raise ValueError(f"DatetimeFeatures(features={features!r}): expected one or more of {list(FEATURES)}")
        self.features = features

    def output_column_names(self, columns: Columns) -> list[str]:
        return [f"{col}_{feature}" for col in flatten_columns(columns) for feature in self.features]

    def transform(self, columns: Columns, frame: Any) -> Any:
        out = {}
        for col in flatten_columns(columns):
            times = self._times(col, frame[col])
            for feature in self.features:
                out[f"{col}_{feature}"] = self._feature(times, feature)
        return backend.frame_from_columns(out, frame.index, like=frame)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        return Schema(ColumnSchema(name, tags={Tags.CONTINUOUS} if name.endswith("_epoch_seconds") else set())
                      for name in self.output_column_names(columns))

    def _times(self, col: str, series: Any) -> Any:
        """``series`` as the library's own datetime column (pandas' arrow-backed dates and
        timestamps become numpy-backed ones, in microseconds: dates after 2262 keep their value)."""
        dtype = series.dtype
        if isinstance(dtype, pd.ArrowDtype) and (dtype.kind == "M" or str(dtype).startswith("date")):
            tz = getattr(dtype.pyarrow_dtype, "tz", None)
            return series.astype(pd.DatetimeTZDtype("us", tz) if tz else "datetime64[us]")
        if pd.api.types.is_datetime64_any_dtype(dtype):
            return series
        raise TypeError(f"{self.label} needs date or timestamp columns, but column {col!r} has dtype {dtype}: "
                        "parse text first (the files' own date or timestamp type, or a Spark/DuckDB cast)")

    def _feature(self, times: Any, feature: str) -> Any:
        if feature == "epoch_seconds":
            return backend.datetime_microseconds(times) / 1e6
        if feature == "weekend":  # from the nullable day of week, so that a null time stays null
            return (self._feature(times, "day_of_week") >= 5).astype(backend.integer_dtype(times, "int16"))
        # Calendar parts of the local wall time: pandas reads them so from a time-zoned column,
        # cuDF from its UTC instants for some (day_of_year); without the zone both read the wall time.
        if getattr(times.dtype, "tz", None) is not None:
            times = times.dt.tz_localize(None)
        # pandas gives int32, or float64 with NaN for NaT; cuDF int16: one dtype in every partition
        return getattr(times.dt, CALENDAR[feature]).astype(backend.integer_dtype(times, "int16"))
