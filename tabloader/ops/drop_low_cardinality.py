"""DropLowCardinality: drop encoded categorical columns that carry too few distinct values."""

from __future__ import annotations

from typing import Any

from tabloader.encoding.contract import first_vocabulary_id
from tabloader.ops.base import Columns, Operator, flatten_columns
from tabloader.schema import ColumnSchema, Schema, Tags


def distinct_values(col: ColumnSchema) -> int | None:
    """How many values of an encoded column have an id of their own: the vocabulary size for a
    Categorify output (its cardinality less the reserved ids and OOV buckets), the cardinality
    for other encoders; None when the schema records no cardinality (not fitted, not encoded).

    Example:
        >>> distinct_values(ColumnSchema("c", properties={"cardinality": 7, "num_buckets": 1, "embedding_table": "c"}))
        4
    """
    card = col.properties.get("cardinality")
    if card is None:
        return None
    if "embedding_table" in col.properties:  # the Categorify contract: reserved ids, then OOV buckets
        return int(card) - first_vocabulary_id(int(col.properties.get("num_buckets", 1)))
    return int(card)


class DropLowCardinality(Operator):
    """Keep every selected column except categorical ones with fewer than ``min_cardinality``
    distinct values (see :func:`distinct_values`), as NVTabular's ``DropLowCardinality``.

    The cardinalities come from the schema, so put it after the encoder (``Categorify``): the
    columns it keeps are chosen when the workflow is fit, from the fitted encoder, and saved
    with the workflow. Columns without a recorded cardinality are kept.

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> from tabloader import ops
        >>> frame = pd.DataFrame({"one": ["a", "a", "a"], "two": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]})
        >>> wf = tl.Workflow((["one", "two"] >> ops.Categorify() >> DropLowCardinality()) + ["x"], progress=False)
        >>> wf.fit_transform(frame).columns.tolist()
        ['two', 'x']
    """

    device_note = "Selects columns by the schema: no computation on the data."

    def __init__(self, min_cardinality: int = 2) -> None:
        self.min_cardinality = min_cardinality

    def _keeps(self, col: ColumnSchema) -> bool:
        count = distinct_values(col)
        return Tags.CATEGORICAL not in col.tags or count is None or count >= self.min_cardinality

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        cols = [input_schema[c] if c in input_schema else ColumnSchema(c) for c in flatten_columns(columns)]
        return Schema(c for c in cols if self._keeps(c))

    def transform(self, columns: Columns, frame: Any) -> Any:
        return frame[flatten_columns(columns)]  # the node keeps the columns its schema names
