"""``Dataset(path, filters=...)``: keep the files whose hive partition keys pass, before any
file is opened.

Daily folders are how most training data is kept (``dt=2024-12-01/``); a run trains on some
days and validates on the next. ``filters`` picks them by key value in pandas' and pyarrow's
``read_parquet(filters=...)`` form: a list of ``(key, op, value)`` conditions that must all hold,
or a list of such lists, any of which may hold. Only the ``key=value`` folders (and a Delta
table's partition values) are filtered: whole files are kept or dropped, so no row is ever
filtered inside a file, row counts stay known from the footers, and the dropped files' footers
are never read -- selecting one day of three years of folders opens one day's files. Rows are
kept by a column's values with ``ops.Filter`` in a workflow.

A key compares as its type (see :func:`~tabloader.dataset.parquet_layout.hive_keys`): a date key
takes ``datetime.date`` values or ISO strings (``"2024-12-01"``), an integer key ints. A null key
(``__HIVE_DEFAULT_PARTITION__``) passes no condition, as in SQL and pyarrow.

Example:
    >>> filters = as_conditions([("dt", ">=", "2024-12-01"), ("country", "in", ["DE", "FR"])])
    >>> [[c.key for c in conjunction] for conjunction in filters]
    [['dt', 'country']]
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Sequence

from tabloader.dataset.parquet_layout import hive_keys

_COMPARE = {"=": operator.eq, "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge}
OPS = (*_COMPARE, "in", "not in")


@dataclasses.dataclass(frozen=True)
class Condition:
    """One ``(key, op, value)`` of ``filters``; ``value`` a list for ``in`` and ``not in``."""

    key: str
    op: str
    value: Any

    def holds(self, value: Any) -> bool:
        if value is None:  # a null key: unknown, so not kept (SQL, pyarrow)
            return False
        if self.op == "in":
            return value in self.value
        if self.op == "not in":
            return value not in self.value
        return _COMPARE[self.op](value, self.value)


def as_conditions(filters: Any) -> list[list[Condition]]:
    """``filters`` as a list of conjunctions (any may hold) of conditions (all must hold),
    checked for shape and operators; values are typed later, by :func:`kept_files`."""
    if not isinstance(filters, (list, tuple)) or not filters:
        raise ValueError(f"filters={filters!r}: expected a non-empty list of (key, op, value) conditions, or a list "
                         "of such lists (any of which may hold)")
    conjunctions = filters if all(isinstance(f, list) for f in filters) else [filters]
    return [[_condition(c) for c in _non_empty(conjunction)] for conjunction in conjunctions]


def _non_empty(conjunction: Any) -> Any:
    if not conjunction:
        raise ValueError("filters: an empty list of conditions; give at least one (key, op, value)")
    return conjunction


def _condition(item: Any) -> Condition:
    if not isinstance(item, (list, tuple)) or len(item) != 3 or not isinstance(item[0], str):
        raise ValueError(f"filters: {item!r} is not a (key, op, value) condition")
    key, op, value = item
    if op not in OPS:
        raise ValueError(f"filters: {item!r} has the operator {op!r}; expected one of {list(OPS)}")
    if op in ("in", "not in") and (isinstance(value, (str, bytes)) or not hasattr(value, "__iter__")):
        raise ValueError(f"filters: {item!r}: {op!r} takes a list of values")
    return Condition(key, op, list(value) if op in ("in", "not in") else value)


def kept_files(paths: Sequence[str], bases: Sequence[str], partition_types: Any, filters: Any,
               where: str, stored: Sequence[Any] = (), known: Sequence[str] = ()) -> tuple[list[int], dict[str, Any]]:
    """The positions of the files (``paths``, found under ``bases``) whose partition keys pass
    ``filters``, and the keys' types, typed as the dataset types them (``stored``: column types
    of files that may store keys, ``known``: keys a table declares, see
    :func:`~tabloader.dataset.parquet_layout.hive_keys`); ``where`` names the dataset in errors
    (a filter on a column that is not a key, a value the key's type cannot hold, no file kept
    of some: a table without files stays empty)."""
    conjunctions = as_conditions(filters)
    types, keys = hive_keys(paths, bases, partition_types, stored, known)
    typed = [[_typed(c, types, where) for c in conjunction] for conjunction in conjunctions]
    values = [dict(pairs) for pairs in keys]
    kept = [i for i, found in enumerate(values)
            if any(all(c.holds(found.get(c.key)) for c in conjunction) for conjunction in typed)]
    if not kept and paths:
        raise ValueError(f"filters={filters!r} keep none of the {len(paths)} files of {where}; its keys take the values "
                         f"{_values(keys)}")
    return kept, types


def _typed(condition: Condition, types: dict[str, Any], where: str) -> Condition:
    """``condition`` with its value(s) as the key's type compares them (a date from an ISO string...)."""
    if condition.key not in types:
        keys = f"its partition keys are {list(types)}" if types else "it has no key=value folders"
        raise ValueError(f"filters name {condition.key!r}, which is not a partition key of {where} ({keys}): filters "
                         "keep or drop whole files by their folders; keep rows by a column's values with ops.Filter "
                         "in a workflow")
    kind = types[condition.key]
    if condition.op in ("in", "not in"):
        return dataclasses.replace(condition, value=[_as_type(condition, v, kind) for v in condition.value])
    return dataclasses.replace(condition, value=_as_type(condition, condition.value, kind))


def _as_type(condition: Condition, value: Any, kind: Any) -> Any:
    import pyarrow as pa

    if isinstance(value, (int, float)) and not isinstance(value, bool) and (
            pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return value  # numbers compare as numbers: a bound past the key's int32 range is a bound still
    if (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and not isinstance(value, str):
        # as text, 7 > "10" and 7 != "07": refused rather than compared in an order nobody meant
        raise ValueError(f"filters: {(condition.key, condition.op, condition.value)!r}: the key {condition.key!r} is "
                         f"text (some folder values do not read as numbers or dates exactly: a leading zero, an "
                         f"integer past int64...), so {value!r} would compare as text; give the value as the folders "
                         f"spell it, or type the key, such as partition_types={{{condition.key!r}: 'int32'}}")
    try:
        return pa.scalar(value).cast(kind).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        raise ValueError(f"filters: {(condition.key, condition.op, condition.value)!r}: {value!r} is not a value of "
                         f"the key {condition.key!r}, which is {kind} ({exc})") from None


def _values(keys: list[tuple]) -> dict[str, list]:
    """Each key's distinct values (a few), for the message of a filter that keeps nothing."""
    values: dict[str, set] = {}
    for pairs in keys:
        for name, value in pairs:
            values.setdefault(name, set()).add(value)
    return {name: sorted(v, key=lambda x: (x is None, str(x)))[:10] for name, v in values.items()}
