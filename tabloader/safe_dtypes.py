"""Dtype strings and time zones taken from files, checked before pandas sees them.

pandas resolves a time zone named ``dateutil/<path>`` by opening ``<path>`` as a time-zone
file, whatever it is: a dtype string such as ``datetime64[ns, dateutil//etc/passwd]`` in a
saved workflow, a ``_schema.json`` or the pandas metadata of a parquet file would make loading
it read a file outside its folder. Everything tabloader reads back from files passes here
first: a time zone must be a plain zone name (``UTC``, ``Europe/Berlin``, ``Etc/GMT+1``) or a
fixed offset (``+01:00``).

Example:
    >>> check_dtype_string("datetime64[us, Europe/Berlin]", "a schema")
    'datetime64[us, Europe/Berlin]'
    >>> check_dtype_string("datetime64[ns, dateutil//etc/passwd]", "a schema")
    Traceback (most recent call last):
    ...
    ValueError: a schema: dtype 'datetime64[ns, dateutil//etc/passwd]' names a time zone that is not a zone name (such as 'UTC' or 'Europe/Berlin') or an offset such as '+01:00'
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["check_dtype_string", "check_time_zone", "check_pandas_metadata"]

# A zone name: letters first, then words of letters, digits, '_', '+', '-' joined by single '/'
# (no '.', no leading '/', so no path); or a fixed offset.
_ZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-:]*(?:/[A-Za-z0-9_+\-:]+)*|[+\-]\d{2}:?\d{2}")  # UTC+01:00 too
# Where a dtype string names a zone: numpy/pandas "datetime64[unit, ZONE]", arrow "tz=ZONE".
_ZONE_IN_DTYPE = re.compile(r"datetime64\[\w+,\s*([^\]]*)\]|tz=([^,\]]*)")


def _plain_zone(zone: Any) -> bool:
    return isinstance(zone, str) and not zone.lower().startswith("dateutil") and _ZONE.fullmatch(zone) is not None


def check_time_zone(zone: Any, where: str) -> Any:
    """``zone`` itself when it is None or a plain zone name or offset, else a ValueError naming ``where``."""
    if zone is None:
        return zone
    if not _plain_zone(zone):
        raise ValueError(f"{where}: time zone {zone!r:.80} is not a zone name (such as 'UTC' or 'Europe/Berlin') or "
                         "an offset such as '+01:00'")
    return zone


def check_dtype_string(dtype: Any, where: str) -> Any:
    """``dtype`` itself when the time zones it names are plain (see the module), else a ValueError."""
    if not isinstance(dtype, str):
        return dtype
    zones = [(m.group(1) or m.group(2) or "").strip() for m in _ZONE_IN_DTYPE.finditer(dtype)]
    if "dateutil" in dtype.lower() or not all(_plain_zone(zone) for zone in zones):  # pandas would open a file
        raise ValueError(f"{where}: dtype {dtype!r:.120} names a time zone that is not a zone name (such as 'UTC' "
                         "or 'Europe/Berlin') or an offset such as '+01:00'")
    return dtype


def check_pandas_metadata(arrow_schema: Any, where: str) -> None:
    """Check the time zones of a parquet file's arrow schema and of its pandas metadata (which
    ``pandas.read_parquet`` turns into dtypes), raising a ValueError naming ``where``."""
    for field in arrow_schema:
        check_time_zone(getattr(field.type, "tz", None), f"{where}, column {field.name!r}")
    raw = (arrow_schema.metadata or {}).get(b"pandas")
    if raw is None:
        return
    try:
        meta = json.loads(raw)
    except ValueError:
        raise ValueError(f"{where}: its pandas metadata is not JSON") from None
    entries = [*meta.get("columns", []), *meta.get("column_indexes", [])] if isinstance(meta, dict) else []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        check_dtype_string(entry.get("numpy_type"), where)
        check_dtype_string(entry.get("pandas_type"), where)
        extra = entry.get("metadata")
        if isinstance(extra, dict):
            check_time_zone(extra.get("timezone"), where)
