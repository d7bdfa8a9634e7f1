"""Writing ``key=value`` folders (``to_parquet(partition_on=...)``): which columns can be keys,
how a value is spelled as a folder name, and a partition split by its keys' values.

Folder names follow Spark's and Hive's spelling, which pyarrow, DuckDB, polars and tabloader's
own reader take back: a null is ``__HIVE_DEFAULT_PARTITION__``; characters a path cannot hold
(``/``, ``=``, ``%``, ``:``...) are percent-escaped; a date is ``2024-12-01``; a timestamp
``2024-12-01 10:30:00[.ffffff]`` (its ``:`` escaped). Keys are integers, strings, dates and
timestamps without a time zone: what reading the folders gives back as the same values (a
float's text would round; a boolean would come back as text).

Example:
    >>> import datetime
    >>> folder_value("a/b"), folder_value(datetime.date(2024, 12, 1)), folder_value(None)
    ('a%2Fb', '2024-12-01', '__HIVE_DEFAULT_PARTITION__')
"""

from __future__ import annotations

import datetime
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd

from tabloader.dataset.parquet_layout import HIVE_NULL

# The characters Spark escapes in partition values (ExternalCatalogUtils.escapePathName), and control characters.
_ESCAPED = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(0x20)}


def check_keys(meta: Any, keys: Sequence[str], where: str) -> list[str]:
    """``keys`` checked against the columns of ``meta`` (an empty partition): present, of a
    type folders keep exactly, not every column."""
    keys = [keys] if isinstance(keys, str) else list(keys)
    missing = [k for k in keys if k not in meta.columns]
    if missing or not keys:
        raise ValueError(f"partition_on={keys!r}: {missing or 'no column'} not among the columns of {where} "
                         f"({list(meta.columns)})")
    if len(keys) == len(meta.columns):
        raise ValueError(f"partition_on={keys!r} names every column of {where}: the files would hold none")
    for key in keys:
        dtype = meta[key].dtype
        if not _folder_type(dtype):
            raise TypeError(f"partition_on: column {key!r} of {where} has dtype {dtype}, which key=value folders do "
                            "not keep exactly; keys are integers, strings, dates and timestamps without a time zone "
                            "(cast it with ops.AsType, or round floats into integers, first)")
    return keys


def _folder_type(dtype: Any) -> bool:
    if isinstance(dtype, pd.ArrowDtype):
        return str(dtype).startswith("date32")
    if isinstance(dtype, pd.DatetimeTZDtype):
        return False
    return (pd.api.types.is_integer_dtype(dtype) or pd.api.types.is_string_dtype(dtype)
            or pd.api.types.is_datetime64_dtype(dtype)) and not pd.api.types.is_bool_dtype(dtype)


def folder_value(value: Any) -> str:
    """A key's value as its folder spells it (see the module)."""
    if value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and np.isnan(value)):
        return HIVE_NULL
    if isinstance(value, (datetime.datetime, np.datetime64)):
        moment = pd.Timestamp(value)
        if moment.nanosecond:  # read back as timestamp[us]: two such keys would become one
            raise ValueError(f"the timestamp {moment} has nanoseconds, which key=value folders do not keep (they "
                             "are read back in microseconds): floor the column to microseconds first")
        fraction = f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else ""  # as Spark: 10:00:00.5
        text = moment.strftime("%Y-%m-%d %H:%M:%S") + fraction
    elif isinstance(value, datetime.date):
        text = value.isoformat()
    elif isinstance(value, (int, np.integer)):
        text = str(int(value))
    else:
        text = str(value)
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def split_by_keys(frame: pd.DataFrame, keys: Sequence[str]) -> Iterator[tuple[str, pd.DataFrame]]:
    """``(folder, rows)`` for each combination of the ``keys``' values in ``frame`` (a pandas
    partition), the folder as ``k1=v1/k2=v2`` and the rows without the key columns."""
    rest = [c for c in frame.columns if c not in keys]
    for values, rows in frame.groupby(list(keys), dropna=False, sort=True, observed=True):
        values = values if isinstance(values, tuple) else (values,)
        folders = []
        for key, value in zip(keys, values):
            try:
                folders.append(f"{key}={folder_value(value)}")
            except ValueError as exc:
                raise ValueError(f"partition_on: column {key!r}: {exc}") from None
        yield "/".join(folders), rows[rest]
