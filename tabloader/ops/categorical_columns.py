"""What the categorical operators share: per-column parameters, the bucket-count check, the
schema of an encoded column and its embedding width.

Example:
    >>> from tabloader.schema import ColumnSchema
    >>> col = categorical_schema(ColumnSchema("c", "int64"), cardinality=100, dtype="int64")
    >>> col.properties["cardinality"], col.properties["embedding_dim"], sorted(col.tags)
    (100, 21, ['categorical'])
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tabloader.schema import ColumnSchema, Tags, suggested_embedding_dim


def embedding_dim(cardinality: int) -> int:
    """Suggested embedding width for a table of ``cardinality`` rows: the one rule,
    :func:`tabloader.schema.suggested_embedding_dim`, kept under this name for compatibility.

    Example:
        >>> embedding_dim(10), embedding_dim(1000), embedding_dim(10**9)
        (6, 77, 512)
    """
    return suggested_embedding_dim(cardinality)


def param_for(value: Any, key: str, default: Any) -> Any:
    """A per-column parameter: ``value`` itself, or ``value[key]`` (``default`` when absent) for a dict."""
    if isinstance(value, Mapping):
        return value.get(key, default)
    return default if value is None else value


def check_num_buckets(op: Any, num_buckets: Any, minimum: int, why: str = "") -> list[tuple[str | None, int]]:
    """``(column or None, num_buckets)`` pairs of an int-or-dict parameter, each an integer >= ``minimum``.

    Example:
        >>> from tabloader.ops import HashBucket
        >>> check_num_buckets(HashBucket(2), {"a": 3}, 2)
        [('a', 3)]
    """
    items = num_buckets.items() if isinstance(num_buckets, Mapping) else [(None, num_buckets)]
    for _, nb in items:
        if isinstance(nb, bool) or not isinstance(nb, (int, np.integer)) or nb < minimum:
            raise ValueError(f"{type(op).__name__}: num_buckets must be an integer >= {minimum}{why}, got {nb!r}")
    return [(name, int(nb)) for name, nb in items]


# Properties describing the raw values; they no longer hold once a column is encoded.
_RAW_VALUE_PROPERTIES = ("domain", "max_distinct")


def categorical_schema(col: ColumnSchema, cardinality: int, dtype: str, **properties: Any) -> ColumnSchema:
    kept = {k: v for k, v in col.properties.items() if k not in _RAW_VALUE_PROPERTIES}
    out = ColumnSchema(col.name, dtype, col.tags - {str(Tags.CONTINUOUS)} | {str(Tags.CATEGORICAL)}, kept, col.is_list)
    return out.with_properties(cardinality=int(cardinality), embedding_dim=embedding_dim(cardinality),
                               domain={"min": 0, "max": int(cardinality) - 1}, **properties)
