"""Embedding table sizes of a workflow's categorical outputs (NVTabular's ``get_embedding_sizes``).

Example:
    >>> import pandas as pd, tabloader as tl
    >>> from tabloader import ops
    >>> wf = tl.Workflow(["c"] >> ops.Categorify(), progress=False).fit(pd.DataFrame({"c": ["a", "b", "a"]}))
    >>> get_embedding_sizes(wf)
    {'c': (5, 4)}
"""

from __future__ import annotations

from typing import Any

from tabloader.schema import Schema, Tags, suggested_embedding_dim


def get_embedding_sizes(source: Any, multi_hot: bool | None = None) -> dict[str, tuple[int, int]]:
    """``{column: (cardinality, embedding_dim)}`` for every categorical output column that
    records a ``cardinality`` (Categorify, HashBucket, HashedCross, Bucketize...).

    ``embedding_dim`` is the column's schema property when it has one, else
    :func:`tabloader.schema.suggested_embedding_dim` of the cardinality (the one rule the
    encoders record). ``multi_hot=True`` keeps only list columns, ``False`` only the others,
    None (default) both.

    Args:
        source: a fitted :class:`~tabloader.Workflow` (its output schema) or a
            :class:`~tabloader.Schema`.

    Example:
        >>> from tabloader.schema import ColumnSchema
        >>> schema = Schema([ColumnSchema("c", tags={"categorical"}, properties={"cardinality": 1000}),
        ...                  ColumnSchema("l", tags={"categorical"}, properties={"cardinality": 10}, is_list=True)])
        >>> get_embedding_sizes(schema), get_embedding_sizes(schema, multi_hot=True)
        ({'c': (1000, 77), 'l': (10, 6)}, {'l': (10, 6)})
    """
    schema = source if isinstance(source, Schema) else getattr(source, "output_schema", None)
    if not isinstance(schema, Schema):
        raise TypeError(f"get_embedding_sizes takes a fitted Workflow or a Schema, got {type(source).__name__}")
    sizes = {}
    for col in schema.select_by_tag(Tags.CATEGORICAL):
        card = col.properties.get("cardinality")
        if card is None or (multi_hot is not None and col.is_list != multi_hot):
            continue
        sizes[col.name] = (int(card), int(col.properties.get("embedding_dim") or suggested_embedding_dim(card)))
    return sizes
