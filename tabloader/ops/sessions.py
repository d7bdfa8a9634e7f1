"""Groupby: aggregate rows by key into one row per group (sessions, users), NVTabular's ``Groupby``.

Each partition is aggregated on its own, as NVTabular does: a group whose rows lie in several
partitions gives one row per partition. Write the data partitioned by key (every row of a key
in one file or row group, e.g. sorted by key and cut at key boundaries) or read it as one
partition when groups must be whole.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from tabloader.ops.base import Columns, Operator, flatten_columns
from tabloader.schema import ColumnSchema, Schema, Tags

#: Aggregations that give list columns or pick an element of the group's list.
LIST_AGGS = ("list", "first", "last")
#: Aggregations pandas (and cuDF) compute per group; nulls are left out, as in pandas.
REDUCE_AGGS = ("count", "sum", "mean", "min", "max", "std", "var")


class Groupby(Operator):
    """One row per group of ``groupby_cols``, with aggregations of the other selected columns.

    Rows are first sorted by ``sort_cols`` (stably: ties keep the input order), so ``list``
    gives each group's values in that order, and ``first`` / ``last`` its first / last value
    (a null included, as NVTabular takes the list's first element). ``count``, ``sum``,
    ``mean``, ``min``, ``max``, ``std`` and ``var`` (ddof=1) leave nulls out, as pandas does.
    Outputs are the key columns, then ``{column}{name_sep}{agg}`` per aggregation; groups come
    sorted by key, rows with a null key are dropped (pandas' and NVTabular's default). The
    operator changes the rows (``preserves_rows = False``): combine its output with other
    branches only through its own columns. Groups are aggregated per partition (see
    :mod:`tabloader.ops.sessions`).

    Args:
        groupby_cols: the key column(s).
        sort_cols: columns to sort the rows by before aggregating (none: input order).
        aggs: an aggregation or a list of them for every non-key column, or a dict column ->
            aggregation(s).
        name_sep: separator of the output names.

    Example:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"user": [2, 1, 2, 1], "t": [4, 3, 1, 2], "item": [10, 11, 12, 13]})
        >>> out = Groupby("user", sort_cols="t", aggs={"item": ["list", "last"], "t": "count"}).transform(
        ...     ["user", "t", "item"], frame)
        >>> out.columns.tolist(), out["item_list"].tolist(), out["item_last"].tolist(), out["t_count"].tolist()
        (['user', 'item_list', 'item_last', 't_count'], [[13, 11], [12, 10]], [11, 10], [2, 2])
    """

    preserves_rows = False
    runs_on = frozenset({"cpu"})
    device_note = ("Runs on the host: list aggregations are built with pyarrow from the sorted rows "
                   "(GPU partitions are copied to the host and back).")

    def __init__(self, groupby_cols: str | Sequence[str], sort_cols: str | Sequence[str] | None = None,
                 aggs: str | Sequence[str] | Mapping[str, str | Sequence[str]] = "list", name_sep: str = "_") -> None:
        self.groupby_cols = [groupby_cols] if isinstance(groupby_cols, str) else list(groupby_cols)
        self.sort_cols = [] if sort_cols is None else [sort_cols] if isinstance(sort_cols, str) else list(sort_cols)
        self.aggs = dict(aggs) if isinstance(aggs, Mapping) else aggs
        self.name_sep = name_sep
        if not self.groupby_cols:
            raise ValueError("Groupby needs at least one groupby column")
        for col, names in self._agg_items(["?"]):
            unknown = [a for a in names if a not in LIST_AGGS + REDUCE_AGGS]
            if unknown:
                raise ValueError(f"Groupby: unknown aggregation(s) {unknown} for {col!r}; "
                                 f"the aggregations are {list(LIST_AGGS + REDUCE_AGGS)}")

    def _agg_items(self, values: Sequence[str]) -> list[tuple[str, list[str]]]:
        """(column, aggregations) for the non-key ``values`` columns."""
        def as_list(a: Any) -> list[str]:
            return [a] if isinstance(a, str) else list(a)

        if isinstance(self.aggs, Mapping):
            return [(c, as_list(a)) for c, a in self.aggs.items()]
        return [(c, as_list(self.aggs)) for c in values]

    def _plan(self, columns: Columns) -> list[tuple[str, str]]:
        cols = flatten_columns(columns)
        missing = [c for c in self.groupby_cols + self.sort_cols if c not in cols]
        if missing:
            raise KeyError(f"Groupby: column(s) {missing} (groupby_cols / sort_cols) are not selected; selected: {cols}")
        values = [c for c in cols if c not in self.groupby_cols]
        plan = [(c, a) for c, aggs in self._agg_items(values) for a in aggs]
        absent = sorted({c for c, _ in plan if c not in values})
        if absent:
            raise KeyError(f"Groupby: aggregations of column(s) {absent}, which are not selected non-key columns; "
                           f"those are {values}")
        return plan

    def output_column_names(self, columns: Columns) -> list[str]:
        return self.groupby_cols + [f"{c}{self.name_sep}{a}" for c, a in self._plan(columns)]

    def transform(self, columns: Columns, frame: Any) -> Any:
        plan = self._plan(columns)
        if self.sort_cols:
            frame = frame.sort_values(self.sort_cols, kind="stable")
        frame = frame.reset_index(drop=True)
        reduced = frame.groupby(self.groupby_cols, sort=True, dropna=True)
        group = reduced.ngroup().fillna(-1).to_numpy(dtype=np.int64)  # -1: a null key, dropped
        kept = np.flatnonzero(group >= 0)
        order = kept[np.argsort(group[kept], kind="stable")]  # rows of group 0, then 1, ...; input order within
        sizes = np.bincount(group[kept], minlength=reduced.ngroups)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        firsts, lasts = order[offsets[:-1]], order[offsets[1:] - 1]
        out = {k: frame[k].iloc[firsts].reset_index(drop=True) for k in self.groupby_cols}
        for col, agg in plan:
            name = f"{col}{self.name_sep}{agg}"
            if agg == "list":
                out[name] = _lists(frame[col].iloc[order], offsets, name)
            elif agg in ("first", "last"):
                out[name] = frame[col].iloc[firsts if agg == "first" else lasts].reset_index(drop=True)
            else:
                out[name] = reduced[col].agg(agg).reset_index(drop=True)
        return pd.DataFrame(out)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        out = [input_schema[k] if k in input_schema else ColumnSchema(k) for k in self.groupby_cols]
        for col, agg in self._plan(columns):
            name = f"{col}{self.name_sep}{agg}"
            base = input_schema[col] if col in input_schema else ColumnSchema(col)
            if agg in LIST_AGGS:
                out.append(ColumnSchema(name, base.dtype, base.tags, {}, is_list=agg == "list"))
            else:
                out.append(ColumnSchema(name, tags={str(Tags.CONTINUOUS)}))
        return Schema(out)


def _lists(values: pd.Series, offsets: np.ndarray, name: str) -> pd.Series:
    """A list column of ``values`` (already in group order) cut at ``offsets``."""
    import pyarrow as pa

    elements = pa.array(values.reset_index(drop=True), from_pandas=True)
    if isinstance(elements, pa.ChunkedArray):  # pyarrow-backed columns
        elements = elements.combine_chunks()
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int64() if len(elements) >= 2**31 else pa.int32()), elements)
    return pd.Series(lists, dtype=pd.ArrowDtype(lists.type), name=name)

